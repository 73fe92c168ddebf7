package analyze

import (
	"fmt"
	"html/template"
	"io"
	"strings"
)

// WriteHTML writes the report as one self-contained HTML page: the summary,
// notes, the metrics table with intervals and every figure as inline SVG.
// Nothing is loaded from elsewhere, so the file can be mailed or archived.
func WriteHTML(w io.Writer, rep *Report, figs []Figure) error {
	var text strings.Builder
	if err := WriteTable(&text, rep); err != nil {
		return err
	}
	type fig struct {
		Title, Caption string
		SVG            template.HTML
	}
	data := struct {
		Title          string
		Runs           []RunSummary
		Rep            *Report
		Rows           []htmlRow
		IntervalLegend string
		Figures        []fig
		Text           string
	}{Title: "servetrace report", Runs: rep.Runs, Rep: rep, Rows: htmlRows(rep), IntervalLegend: intervalLegend(rep.Interval), Text: text.String()}
	if len(rep.Runs) > 0 {
		data.Title = "servetrace report: " + rep.Runs[0].RunID
	}
	for _, f := range figs {
		data.Figures = append(data.Figures, fig{Title: f.Title, Caption: f.Caption, SVG: template.HTML(f.SVG)}) // #nosec: SVG rendered by gonum/plot here
	}
	return htmlTemplate.Execute(w, data)
}

// htmlRow is one metric line of the HTML table.
type htmlRow struct {
	Name, Help, Interval string
	N                    int
	Cells                []string
}

func htmlRows(rep *Report) []htmlRow {
	var rows []htmlRow
	for _, name := range MetricOrder {
		d, ok := rep.Metrics[name]
		if !ok || d.N == 0 {
			continue
		}
		r := htmlRow{Name: strings.TrimSuffix(name, "_ms"), Help: metricHelp[name], Interval: intervalText(d), N: d.N}
		for _, q := range d.Quantiles {
			cell := quantileCell(q)
			r.Cells = append(r.Cells, cell)
		}
		r.Cells = append(r.Cells, num(d.Max))
		rows = append(rows, r)
	}
	return rows
}

var htmlTemplate = template.Must(template.New("report").Funcs(template.FuncMap{
	"pct": func(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) },
	"num": num,
}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>{{.Title}}</title>
<style>
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:2rem auto;max-width:1100px;color:#222;padding:0 1rem}
h1{font-size:1.5rem;margin-bottom:.2rem}h2{font-size:1.15rem;margin-top:2rem;border-bottom:1px solid #ddd}
.kpis{display:flex;flex-wrap:wrap;gap:.8rem;margin:1rem 0}
.kpi{border:1px solid #ddd;border-radius:6px;padding:.5rem .8rem;min-width:9rem}
.kpi b{display:block;font-size:1.3rem}
.note{background:#fff4e5;border-left:4px solid #e69f00;padding:.3rem .6rem;margin:.3rem 0}
table{border-collapse:collapse;font-size:13px}td,th{padding:.25rem .6rem;border-bottom:1px solid #eee;text-align:right}
td:first-child,th:first-child{text-align:left}
figure{margin:1.2rem 0}figcaption{color:#555;font-size:13px;max-width:760px}
figure svg{max-width:100%;height:auto}
pre{font-size:12px;background:#f7f7f7;padding:.8rem;overflow-x:auto}
</style></head><body>
<h1>{{.Title}}</h1>
{{range .Runs}}<div>run <code>{{.RunID}}</code>{{if not .Complete}} <strong>(PARTIAL: {{.Reason}})</strong>{{end}} against {{.Target}}: offered {{num .OfferedRate}} req/s, sent {{num .AchievedRate}} req/s, client lateness p99 {{num .Lateness.P99Ms}} ms</div>{{end}}
<div class="kpis">
<div class="kpi">requests<b>{{.Rep.Requests.Counted}}</b>success {{pct .Rep.Requests.SuccessRate}}</div>
<div class="kpi">throughput<b>{{num .Rep.Throughput.RequestsPerS}} req/s</b>{{num .Rep.Throughput.OutputTokensPerS}} output tok/s</div>
{{with .Rep.Goodput}}<div class="kpi">goodput<b>{{num .RequestsPerS}} req/s</b>{{pct .MetShare}} met the SLO</div>{{end}}
{{with index .Rep.Metrics "ttft_ms"}}<div class="kpi">TTFT p50<b>{{range .Quantiles}}{{if eq .P 50.0}}{{num .Value}} ms{{end}}{{end}}</b>n {{.N}}</div>{{end}}
</div>
{{range .Rep.Notes}}<div class="note">{{.}}</div>{{end}}
<h2>Latency (ms) with 95% intervals</h2>
<p>{{.IntervalLegend}}.</p>
<table><tr><th>metric</th><th>n</th><th>interval</th>{{with index .Rep.Metrics "ttft_ms"}}{{range .Quantiles}}<th>p{{.P}}</th>{{end}}{{end}}<th>max</th></tr>
{{range .Rows}}<tr><td title="{{.Help}}">{{.Name}}</td><td>{{.N}}</td><td>{{.Interval}}</td>{{range .Cells}}<td>{{.}}</td>{{end}}</tr>{{end}}
</table>
<h2>Figures</h2>
{{range .Figures}}<figure><div class="plot">{{.SVG}}</div><figcaption><b>{{.Title}}.</b> {{.Caption}}</figcaption></figure>
{{end}}
<h2>Full report</h2>
<pre>{{.Text}}</pre>
</body></html>
`))

// WriteFigurePage writes a self-contained page of figures under a title,
// with a text section (a table's output) below them.
func WriteFigurePage(w io.Writer, title, text string, figs []Figure) error {
	type fig struct {
		Title, Caption string
		SVG            template.HTML
	}
	data := struct {
		Title   string
		Figures []fig
		Text    string
	}{Title: title, Text: text}
	for _, f := range figs {
		data.Figures = append(data.Figures, fig{Title: f.Title, Caption: f.Caption, SVG: template.HTML(f.SVG)}) // #nosec: SVG rendered by gonum/plot here
	}
	return figurePage.Execute(w, data)
}

var figurePage = template.Must(template.New("figures").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{.Title}}</title>
<style>
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:2rem auto;max-width:1100px;color:#222;padding:0 1rem}
h1{font-size:1.5rem}figure{margin:1.2rem 0}figcaption{color:#555;font-size:13px;max-width:760px}
figure svg{max-width:100%;height:auto}pre{font-size:12px;background:#f7f7f7;padding:.8rem;overflow-x:auto}
</style></head><body>
<h1>{{.Title}}</h1>
{{range .Figures}}<figure><div class="plot">{{.SVG}}</div><figcaption><b>{{.Title}}.</b> {{.Caption}}</figcaption></figure>
{{end}}<pre>{{.Text}}</pre>
</body></html>
`))
