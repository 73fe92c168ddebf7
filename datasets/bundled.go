package datasets

import (
	"bytes"
	"embed"
	"fmt"
	"io"
	"slices"
)

//go:embed data/azure_llm_code_2023.csv data/mooncake_synthetic_trace.jsonl data/README.md
var files embed.FS

// Dataset is one bundled sample trace.
type Dataset struct {
	Name        string
	File        string
	Format      string
	Description string
	Licence     string
	Citation    string
}

// bundled lists the samples shipped in the binary.
var bundled = []Dataset{
	{
		Name:        "azure-code-2023",
		File:        "azure_llm_code_2023.csv",
		Format:      FormatAzure,
		Description: "Azure LLM inference trace 2023, code completion: one hour of production requests (2023-11-16)",
		Licence:     "CC-BY-4.0",
		Citation:    `Patel et al., "Splitwise: Efficient generative LLM inference using phase splitting", ISCA 2024`,
	},
	{
		Name:        "mooncake-synthetic",
		File:        "mooncake_synthetic_trace.jsonl",
		Format:      FormatMooncake,
		Description: "Mooncake FAST'25 synthetic trace: relative ms arrivals, lengths, 512-token prefix block ids",
		Licence:     "Apache-2.0",
		Citation:    `Qin et al., "Mooncake: Trading More Storage for Less Computation", FAST 2025`,
	},
}

// Bundled returns the bundled samples in a stable order.
func Bundled() []Dataset { return slices.Clone(bundled) }

// Lookup returns the bundled sample with the given name.
func Lookup(name string) (Dataset, bool) {
	for _, d := range bundled {
		if d.Name == name {
			return d, true
		}
	}
	return Dataset{}, false
}

// Bytes returns the sample's raw file contents.
func (d Dataset) Bytes() []byte {
	b, err := files.ReadFile("data/" + d.File)
	if err != nil {
		panic(fmt.Sprintf("datasets: bundled file %s missing from the binary: %v", d.File, err))
	}
	return b
}

// Open returns a reader over the sample's raw file contents.
func (d Dataset) Open() io.Reader { return bytes.NewReader(d.Bytes()) }

// Rows counts the sample's data rows (lines, less a CSV header).
func (d Dataset) Rows() int {
	b := bytes.TrimRight(d.Bytes(), "\n")
	n := bytes.Count(b, []byte("\n")) + 1
	if d.Format == FormatAzure {
		n-- // header
	}
	return n
}

// Attribution returns the bundled README with licences and citations.
func Attribution() string {
	b, _ := files.ReadFile("data/README.md")
	return string(b)
}
