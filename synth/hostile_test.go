package synth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/servetrace/servetrace/trace"
)

// testModel decodes a fresh copy of testdata/NAME-model.json (bundled fits:
// azure, mooncake with prefixes, sessions from sessionFixture).
func testModel(t testing.TB, name string) *Model {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name+"-model.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m Model
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return &m
}

// withinDeadline runs f in a goroutine and fails the test if it neither
// returns nor panics within d (a hang); a panic is returned as an error.
func withinDeadline(t *testing.T, d time.Duration, f func() error) (err error, ok bool) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				done <- fmt.Errorf("panic: %v", r)
			}
		}()
		done <- f()
	}()
	select {
	case err := <-done:
		return err, true
	case <-time.After(d):
		t.Errorf("still running after %v", d)
		return nil, false
	}
}

// TestReadModelRejectsHostileValues edits one field of a real model per
// row and asks ReadModel (or Validate, for values JSON cannot hold) for an
// error naming the field; the "valid" rows must load.
func TestReadModelRejectsHostileValues(t *testing.T) {
	sessions := func(m *Model) *SessionModel { return testModel(t, "sessions").Sessions }
	cases := []struct {
		name, base string
		edit       func(m *Model)
		want       string // a substring of the error; "" means the model is valid
	}{
		{"azure as fitted", "azure", func(m *Model) {}, ""},
		{"mooncake as fitted", "mooncake", func(m *Model) {}, ""},
		{"sessions as fitted", "sessions", func(m *Model) {}, ""},
		{"mix shares longer than values", "azure", func(m *Model) { m.Mix.Model.Shares = append(m.Mix.Model.Shares, 0) }, "mix.model.shares"},
		{"mix shares shorter than values", "azure", func(m *Model) {
			m.Mix.Tenant = Categorical{Values: []string{"a", "b"}, Shares: []float64{1}}
		}, "mix.tenant.shares"},
		{"mix by_hour of 3 rows", "azure", func(m *Model) { m.Mix.API.ByHour = [][]float64{{1}, {1}, {1}} }, "mix.api.by_hour"},
		{"mix by_hour row too long", "azure", func(m *Model) {
			m.Mix.Stream.ByHour = make([][]float64, 24)
			for h := range m.Mix.Stream.ByHour {
				m.Mix.Stream.ByHour[h] = append(slices.Clone(m.Mix.Stream.Shares), 0)
			}
		}, "mix.stream.by_hour[0]"},
		{"mix share above 1", "azure", func(m *Model) {
			m.Mix.Stream = Categorical{Values: []string{"true", "false"}, Shares: []float64{1.5, -0.5}}
		}, "mix.stream.shares[0]"},
		{"mix shares sum to 0.5", "azure", func(m *Model) { m.Mix.Features = Categorical{Values: []string{"a"}, Shares: []float64{0.5}} }, "mix.features.shares"},
		{"mean rate 1e308", "azure", func(m *Model) { m.Arrivals.Intensity.MeanRatePerS = 1e308 }, "arrivals.intensity.mean_rate_per_s"},
		{"mean rate 2e6", "azure", func(m *Model) { m.Arrivals.Intensity.MeanRatePerS = 2e6 }, "arrivals.intensity.mean_rate_per_s"},
		{"mean rate NaN", "azure", func(m *Model) { m.Arrivals.Intensity.MeanRatePerS = math.NaN() }, "arrivals.intensity.mean_rate_per_s"},
		{"mean rate +Inf", "azure", func(m *Model) { m.Arrivals.Intensity.MeanRatePerS = math.Inf(1) }, "arrivals.intensity.mean_rate_per_s"},
		{"piece rate 1e9", "azure", func(m *Model) { m.Arrivals.Intensity.PieceRates[1] = 1e9 }, "arrivals.intensity.piece_rates_per_s[1]"},
		{"piece rate negative", "azure", func(m *Model) { m.Arrivals.Intensity.PieceRates[0] = -3 }, "arrivals.intensity.piece_rates_per_s[0]"},
		{"fourier peak 1e21", "azure", func(m *Model) {
			in := &m.Arrivals.Intensity
			in.Kind, in.DailyHarmonics, in.Coef, in.PieceRates = "fourier", 1, []float64{1, 48, 0}, nil
		}, "arrivals.intensity.coef"},
		{"fourier coefficient NaN", "azure", func(m *Model) {
			in := &m.Arrivals.Intensity
			in.Kind, in.DailyHarmonics, in.Coef, in.PieceRates = "fourier", 1, []float64{1, math.NaN(), 0}, nil
		}, "arrivals.intensity.coef[1]"},
		{"a billion harmonics", "azure", func(m *Model) {
			in := &m.Arrivals.Intensity
			in.Kind, in.DailyHarmonics, in.Coef, in.PieceRates = "fourier", 1e9, []float64{1}, nil
		}, "arrivals.intensity.daily_harmonics"},
		{"renewal shape 1e-300", "azure", func(m *Model) {
			m.Arrivals.Renewal.Chain, m.Arrivals.Renewal.Dist, m.Arrivals.Renewal.Shape = nil, "weibull", 1e-300
		}, "arrivals.renewal.shape"},
		{"renewal law unknown", "azure", func(m *Model) { m.Arrivals.Renewal.Chain, m.Arrivals.Renewal.Dist = nil, "pareto" }, "arrivals.renewal.dist"},
		{"latent sigma 100", "sessions", func(m *Model) { m.Arrivals.Latent.Sigma[0] = 100 }, "arrivals.latent.sigma[0]"},
		{"latent floor 2", "sessions", func(m *Model) { m.Arrivals.Latent.Floor = 2 }, "arrivals.latent.floor"},
		{"latent kind unknown", "azure", func(m *Model) { m.Arrivals.Latent.Kind = "gp" }, "arrivals.latent.kind"},
		{"chain row too short", "azure", func(m *Model) {
			c := m.Arrivals.Renewal.Chain
			c.Transition[0] = c.Transition[0][:1]
		}, "arrivals.renewal.chain.transition[0]"},
		{"chain row not stochastic", "azure", func(m *Model) {
			c := m.Arrivals.Renewal.Chain
			c.Transition[1] = slices.Repeat([]float64{0.9}, len(c.Quantiles))
		}, "arrivals.renewal.chain.transition[1]"},
		{"chain quantiles descending", "azure", func(m *Model) { slices.Reverse(m.Arrivals.Renewal.Chain.Quantiles[1]) }, "arrivals.renewal.chain.quantiles[1]"},
		{"chain order 9", "azure", func(m *Model) { m.Arrivals.Renewal.Chain.Order = 9 }, "arrivals.renewal.chain.order"},
		{"chain edges descending", "azure", func(m *Model) { slices.Reverse(m.Arrivals.Renewal.Chain.Edges) }, "arrivals.renewal.chain.edges"},
		{"class share 2", "azure", func(m *Model) { m.Lengths[0].Share = 2 }, "lengths[0].share"},
		{"input knots descending", "azure", func(m *Model) { slices.Reverse(m.Lengths[0].Input.Knots) }, "lengths[0].input_tokens.knots"},
		{"output knot negative", "azure", func(m *Model) { m.Lengths[0].Output.Knots[0] = -5 }, "lengths[0].output_tokens.knots[0]"},
		{"input knot 1e12", "azure", func(m *Model) {
			k := m.Lengths[0].Input.Knots
			k[len(k)-1] = 1e12
		}, "lengths[0].input_tokens.knots["},
		{"atom p_low above p_high", "azure", func(m *Model) {
			m.Lengths[0].Output.Atoms = []Atom{{Value: 10, PLow: 0.6, PHigh: 0.2}}
		}, "lengths[0].output_tokens.atoms[0]"},
		{"atom value negative", "azure", func(m *Model) {
			m.Lengths[0].Output.Atoms = []Atom{{Value: -10, PLow: 0.1, PHigh: 0.2}}
		}, "lengths[0].output_tokens.atoms[0].value"},
		{"rho 2", "azure", func(m *Model) { m.Lengths[0].Rho = 2 }, "lengths[0].rho"},
		{"rho_sampler NaN", "azure", func(m *Model) { r := math.NaN(); m.Lengths[0].RhoSampler = &r }, "lengths[0].rho_sampler"},
		{"sampler unknown", "azure", func(m *Model) { m.Lengths[0].Sampler = "magic" }, "lengths[0].sampler"},
		{"length bin reversed", "azure", func(m *Model) {
			b := &m.Lengths[0].Bins[0]
			b.InputLow, b.InputHigh = b.InputHigh, b.InputLow
		}, "lengths[0].bins[0]"},
		{"think time negative", "sessions", func(m *Model) { m.Sessions.ThinkS.Knots[0] = -3e9 }, "sessions.think_s.knots[0]"},
		{"think time NaN", "sessions", func(m *Model) { m.Sessions.ThinkS.Knots[3] = math.NaN() }, "sessions.think_s.knots[3]"},
		{"think time of a year", "sessions", func(m *Model) {
			k := m.Sessions.ThinkS.Knots
			k[len(k)-1] = 3e7
		}, "sessions.think_s.knots["},
		{"a billion turns", "sessions", func(m *Model) {
			k := m.Sessions.Turns.Knots
			k[len(k)-1] = 1e9
		}, "sessions.turns.knots["},
		{"new tokens negative", "sessions", func(m *Model) { m.Sessions.NewTokens.Knots[0] = -1 }, "sessions.new_tokens.knots[0]"},
		{"sessions on azure", "azure", func(m *Model) { m.Sessions = sessions(m) }, ""},
		{"multi-turn share 3", "sessions", func(m *Model) { m.Sessions.MultiTurnShare = 3 }, "sessions.multi_turn_share"},
		{"prefix block size 0", "mooncake", func(m *Model) { m.Prefix.BlockSize = 0 }, "prefix.block_size"},
		{"prefix reuse share 1.5", "mooncake", func(m *Model) { m.Prefix.ReuseShare = 1.5 }, "prefix.reuse_share"},
		{"prefix depth above 1", "mooncake", func(m *Model) {
			k := m.Prefix.Depth.Knots
			k[len(k)-1] = 7
		}, "prefix.depth_share.knots["},
		{"prefix age negative", "mooncake", func(m *Model) { m.Prefix.AgeS.Knots[0] = -1 }, "prefix.reuse_age_s.knots[0]"},
		{"prefix bin age descending", "mooncake", func(m *Model) { slices.Reverse(m.Prefix.ByInputBin[0].AgeS.Knots) }, "prefix.laws_by_input_bin[0].reuse_age_s.knots"},
		{"source ends before it starts", "azure", func(m *Model) { m.Source.End = m.Source.Start.Add(-time.Hour) }, "source.end"},
		{"negative row count", "azure", func(m *Model) { m.Source.Rows = -1 }, "source.rows"},
		{"candidate log-likelihood -Inf", "azure", func(m *Model) { m.Arrivals.Renewal.Candidates[0].LogLik = math.Inf(-1) }, "arrivals.renewal.candidates[0].log_lik"},
		{"no length classes", "azure", func(m *Model) { m.Lengths = nil }, "lengths"},
		{"mix value with a newline", "azure", func(m *Model) { m.Mix.Model.Values[0] = "gpt\nInjected: 1" }, "mix.model.values[0]"},
		{"mix api grpc", "azure", func(m *Model) { m.Mix.API = Categorical{Values: []string{"grpc"}, Shares: []float64{1}} }, "mix.api.values[0]"},
		{"mix temperature -1", "azure", func(m *Model) { m.Mix.Temperature = Categorical{Values: []string{"-1"}, Shares: []float64{1}} }, "mix.temperature.values[0]"},
		{"mix of 65 features", "azure", func(m *Model) {
			m.Mix.Features = Categorical{Values: []string{strings.Repeat("f+", 64) + "f"}, Shares: []float64{1}}
		}, "mix.features.values[0]"},
		{"class api soap", "azure", func(m *Model) { m.Lengths[0].API = "soap" }, "lengths[0].api"},
	}
	dir := t.TempDir()
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := testModel(t, c.base)
			c.edit(m)
			path := filepath.Join(dir, fmt.Sprintf("case%d-model.json", i))
			err, ok := withinDeadline(t, 5*time.Second, func() error {
				b, err := json.Marshal(m)
				if err != nil { // a value JSON cannot hold: Validate sees it in memory
					path = "in memory"
					return m.Validate()
				}
				if err := os.WriteFile(path, b, 0o644); err != nil {
					return err
				}
				_, err = ReadModel(path)
				return err
			})
			if !ok {
				return
			}
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("a valid model is refused: %v", err)
			case c.want == "":
			case err == nil:
				t.Fatalf("accepted; want an error naming %s", c.want)
			case strings.HasPrefix(err.Error(), "panic"):
				t.Fatalf("%v", err)
			case !strings.Contains(err.Error(), c.want):
				t.Fatalf("error %q does not name %s", err, c.want)
			case path != "in memory" && !strings.Contains(err.Error(), path):
				t.Fatalf("error %q does not name the file", err)
			case len(err.Error()) > 600:
				t.Fatalf("error of %d bytes: %s", len(err.Error()), err)
			}
		})
	}
}

// TestGeneratePrefixBlocksBounded: one-token blocks and inputs of up to
// 10 million tokens give at most maxPrefixBlocks blocks per request.
func TestGeneratePrefixBlocksBounded(t *testing.T) {
	m := testModel(t, "mooncake")
	m.Prefix.BlockSize = 1
	k := m.Lengths[0].Input.Knots
	for i := range k {
		k[i] = MaxModelTokens
	}
	m.Lengths[0].Input.Atoms = nil
	rows := 0
	err, ok := withinDeadline(t, 30*time.Second, func() error {
		_, err := Generate(context.Background(), m, GenerateOptions{Duration: 10 * time.Second}, func(r trace.Request) error {
			if len(r.PrefixBlocks) > maxPrefixBlocks {
				return fmt.Errorf("row %d has %d prefix blocks", rows, len(r.PrefixBlocks))
			}
			if rows++; rows >= 5 {
				return errRunaway
			}
			return nil
		})
		return err
	})
	if ok && !errors.Is(err, errRunaway) {
		t.Fatal(err)
	}
}

// TestGenerateRowsAreValidTraceRows: with think times of exactly 0 a later
// turn's think_time_ms was a tiny negative number (its previous turn's
// time was rounded to the microsecond), which the trace reader rejects.
func TestGenerateRowsAreValidTraceRows(t *testing.T) {
	m := testModel(t, "sessions")
	m.Sessions.ThinkS = Marginal{N: 1, Knots: []float64{0, 0}}
	later := 0
	_, err := Generate(context.Background(), m, GenerateOptions{Duration: 60 * time.Second}, func(r trace.Request) error {
		if r.Turn > 0 {
			later++
		}
		return r.Validate()
	})
	if err != nil || later == 0 {
		t.Fatalf("%v (%d later turns)", err, later)
	}
}

// errRunaway stops a generation that writes far more rows than asked for.
var errRunaway = errors.New("runaway: more than 2,000,000 rows")

// TestGenerateRefusesHostileOptions asks Generate for workloads it cannot
// bound and wants a clear error up front, never endless rows or a panic.
func TestGenerateRefusesHostileOptions(t *testing.T) {
	cases := []struct {
		name string
		edit func(m *Model)
		opts GenerateOptions
		want string
	}{
		{"rate scale 1e300", nil, GenerateOptions{Duration: 10 * time.Second, RateScale: 1e300}, "RateScale"},
		{"rate scale NaN", nil, GenerateOptions{Duration: 10 * time.Second, RateScale: math.NaN()}, "rate scale"},
		{"rate scale -1", nil, GenerateOptions{Duration: 10 * time.Second, RateScale: -1}, "rate scale"},
		{"time scale 1e-300", nil, GenerateOptions{TimeScale: 1e-300}, "time scale"},
		{"time scale +Inf", nil, GenerateOptions{Duration: 10 * time.Second, TimeScale: math.Inf(1)}, "time scale"},
		{"ten billion rows", nil, GenerateOptions{Duration: 100 * 365 * 24 * time.Hour, RateScale: 10}, "rows"},
		{"past the year 2200", func(m *Model) { m.Arrivals.Intensity.MeanRatePerS = 1e-6 }, GenerateOptions{Duration: 250 * 365 * 24 * time.Hour}, "2200"},
		{"model rate 1e308", func(m *Model) { m.Arrivals.Intensity.MeanRatePerS = 1e308 }, GenerateOptions{Duration: 10 * time.Second}, "mean_rate_per_s"},
		{"flash crowd factor 1e12", nil, GenerateOptions{Duration: 10 * time.Second, Scenarios: []Scenario{{Name: ScenarioFlashCrowd, Params: &FlashCrowd{Factor: 1e12}}}}, "flash-crowd"},
		{"ramp rate 1e308", nil, GenerateOptions{Scenarios: []Scenario{{Name: ScenarioRamp, Params: &Ramp{Rates: []float64{1e308}}}}}, "ramp"},
		{"ramp step negative", nil, GenerateOptions{Scenarios: []Scenario{{Name: ScenarioRamp, Params: &Ramp{Rates: []float64{1, 2}, Step: Duration(-20 * time.Second), Gap: Duration(20 * time.Second)}}}}, "step"},
		{"flash crowd factor NaN", nil, GenerateOptions{Duration: 10 * time.Second, Scenarios: []Scenario{{Name: ScenarioFlashCrowd, Params: &FlashCrowd{Factor: math.NaN()}}}}, "factor"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := testModel(t, "azure")
			if c.edit != nil {
				c.edit(m)
			}
			var rows int
			err, ok := withinDeadline(t, 10*time.Second, func() error {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				_, err := Generate(ctx, m, c.opts, func(trace.Request) error {
					if rows++; rows > 2_000_000 {
						return errRunaway
					}
					return nil
				})
				return err
			})
			if !ok {
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) || strings.HasPrefix(err.Error(), "panic") {
				t.Fatalf("error %v after %d rows; want one naming %q up front", err, rows, c.want)
			}
			if rows > 0 {
				t.Errorf("%d rows before the error; want it up front", rows)
			}
		})
	}
}

// TestWriteModelNamesNonFiniteField: WriteModel refuses a NaN or an
// infinity and names the field holding it.
func TestWriteModelNamesNonFiniteField(t *testing.T) {
	for _, c := range []struct {
		edit func(m *Model)
		want string
	}{
		{func(m *Model) { m.Arrivals.Renewal.Candidates[1].LogLik = math.NaN() }, "arrivals.renewal.candidates[1].log_lik"},
		{func(m *Model) { m.Arrivals.InterArrivalCV = math.Inf(-1) }, "arrivals.inter_arrival_cv"},
		{func(m *Model) { m.Lengths[0].DecileError["copula"] = math.Inf(1) }, "lengths[0].decile_error[copula]"},
	} {
		m := testModel(t, "azure")
		c.edit(m)
		out := filepath.Join(t.TempDir(), "model.json")
		err := WriteModel(out, m)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v; want one naming %s", err, c.want)
		}
		if _, serr := os.Stat(out); serr == nil {
			t.Errorf("%s written", out)
		}
	}
}

// TestGenerateCancelReturnsPromptly cancels a twenty-year workload of a
// rate so low that arrivals are rare: Generate must still notice.
func TestGenerateCancelReturnsPromptly(t *testing.T) {
	m := testModel(t, "azure")
	m.Arrivals.Intensity.MeanRatePerS, m.Arrivals.Intensity.PieceRates = 1e-9, nil
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	err, ok := withinDeadline(t, 5*time.Second, func() error {
		_, err := Generate(ctx, m, GenerateOptions{Duration: 20 * 365 * 24 * time.Hour}, func(trace.Request) error { return nil })
		return err
	})
	if ok && !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v; want context.Canceled", err)
	}
}
