// Program grafana-schema checks a Grafana dashboard against Grafana's own dashboard
// schema, as the Grafana Foundation SDK (github.com/grafana/grafana-foundation-sdk,
// Apache-2.0) generates it from Grafana's CUE kinds: the dashboard, every panel's
// options and field config by its panel type, every query by its data source type.
// It decodes strictly (an unknown field or a value of the wrong type is an error),
// runs the schema's constraints (Validate), and then prints, as JSON on stdout, the
// PromQL the decoded dashboard runs (panel targets, annotation queries, variable
// queries), so that the caller checks their metric names against the agent's.
//
// Grafana itself (AGPL) is neither shipped nor run. tests/tests/deploy_manifests.rs
// builds this into the per-user cache (tests/src/grafana_schema.rs) and runs it on
// deploy/monitoring/dashboard.json.
//
// Usage: grafana-schema DASHBOARD.json
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
)

// Query is one PromQL expression of the dashboard and where it is.
type Query struct {
	Where string `json:"where"`
	Expr  string `json:"expr"`
}

// Report is what the caller checks further.
type Report struct {
	Panels  int     `json:"panels"`
	Queries []Query `json:"queries"`
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: grafana-schema DASHBOARD.json")
		os.Exit(2)
	}
	raw, err := os.ReadFile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	report, err := check(raw)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s does not match Grafana's dashboard schema:\n%v\n", os.Args[1], err)
		os.Exit(1)
	}
	out, _ := json.MarshalIndent(report, "", "  ")
	fmt.Println(string(out))
}

func check(raw []byte) (Report, error) {
	// Panel types and data source types decode by their own schemas only when the
	// SDK's variants are registered; an unregistered panel type is an error below.
	plugins.RegisterDefaultPlugins()
	// The strict decoding finds what does not fit the schema, but its nested values are
	// lost to the empty-list error above (a panel, a query); the ordinary decoding
	// keeps them, and the round trip checks that it kept everything.
	var strict dashboard.Dashboard
	if err := failed(strict.UnmarshalJSONStrict(raw)); err != nil {
		return Report{}, err
	}
	var d dashboard.Dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		return Report{}, err
	}
	if err := failed(d.Validate()); err != nil {
		return Report{}, err
	}
	if err := roundTrip(raw, d); err != nil {
		return Report{}, err
	}
	var report Report
	var errs []error
	for _, p := range d.Panels {
		if p.RowPanel != nil {
			for i := range p.RowPanel.Panels {
				errs = append(errs, panel(&p.RowPanel.Panels[i], &report)...)
			}
			continue
		}
		if p.Panel != nil {
			errs = append(errs, panel(p.Panel, &report)...)
		}
	}
	for _, a := range d.Annotations.List {
		if a.BuiltIn != nil && *a.BuiltIn == 1 {
			continue
		}
		where := fmt.Sprintf("annotation %q", a.Name)
		if a.Datasource == nil || a.Datasource.Type == nil || *a.Datasource.Type != "prometheus" {
			errs = append(errs, fmt.Errorf("%s: not a prometheus data source", where))
			continue
		}
		if a.Expr == nil || *a.Expr == "" {
			errs = append(errs, fmt.Errorf("%s: no expr", where))
			continue
		}
		report.Queries = append(report.Queries, Query{Where: where, Expr: *a.Expr})
		if a.Target != nil {
			target, ok := a.Target.(*prometheus.Dataquery)
			if !ok {
				errs = append(errs, fmt.Errorf("%s: target is a %T, not a Prometheus query", where, a.Target))
			} else if target.Expr != *a.Expr {
				errs = append(errs, fmt.Errorf("%s: target's expr differs from the annotation's", where))
			}
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != dashboard.VariableTypeQuery {
			continue
		}
		if v.Definition == nil || *v.Definition == "" {
			errs = append(errs, fmt.Errorf("variable %q: no definition", v.Name))
			continue
		}
		report.Queries = append(report.Queries, Query{Where: fmt.Sprintf("variable %q", v.Name), Expr: *v.Definition})
	}
	return report, errors.Join(errs...)
}

// failed is err unless it is an empty list: the SDK's strict decoding returns its
// error list as an error even when the list is empty (a nil slice in a non-nil
// interface).
func failed(err error) error {
	var list cog.BuildErrors
	if errors.As(err, &list) && len(list) == 0 {
		return nil
	}
	return err
}

// panel checks that the panel's type has a schema and that each target decoded as a
// Prometheus query with an expression, and collects those.
func panel(p *dashboard.Panel, report *Report) []error {
	title := ""
	if p.Title != nil {
		title = *p.Title
	}
	where := fmt.Sprintf("panel %q", title)
	if _, known := cog.ConfigForPanelcfgVariant(p.Type); !known {
		return []error{fmt.Errorf("%s: Grafana has no panel type %q", where, p.Type)}
	}
	report.Panels++
	if len(p.Targets) == 0 {
		return []error{fmt.Errorf("%s: no query", where)}
	}
	var errs []error
	for i, t := range p.Targets {
		q, ok := t.(*prometheus.Dataquery)
		if !ok {
			errs = append(errs, fmt.Errorf("%s: target %d is a %T, not a Prometheus query", where, i, t))
			continue
		}
		if q.Expr == "" {
			errs = append(errs, fmt.Errorf("%s: target %d has no expr", where, i))
			continue
		}
		report.Queries = append(report.Queries, Query{Where: fmt.Sprintf("%s target %d", where, i), Expr: q.Expr})
	}
	return errs
}

// roundTrip checks that the decoded dashboard, encoded again, holds every value of the
// file (the SDK may add its defaults, never lose or change one of ours).
func roundTrip(raw []byte, d dashboard.Dashboard) error {
	again, err := json.Marshal(d)
	if err != nil {
		return err
	}
	var before, after any
	if err := json.Unmarshal(raw, &before); err != nil {
		return err
	}
	if err := json.Unmarshal(again, &after); err != nil {
		return err
	}
	return errors.Join(kept("", before, after)...)
}

// kept lists the values of `before` that `after` lacks or holds otherwise.
func kept(path string, before, after any) []error {
	switch b := before.(type) {
	case map[string]any:
		a, ok := after.(map[string]any)
		if len(b) == 0 && after == nil {
			return nil
		}
		if !ok {
			return []error{fmt.Errorf("%s: an object became %v", path, after)}
		}
		var errs []error
		for k, v := range b {
			errs = append(errs, kept(path+"."+k, v, a[k])...)
		}
		return errs
	case []any:
		a, ok := after.([]any)
		if len(b) == 0 && after == nil {
			return nil // an empty list the encoding leaves out (omitempty)
		}
		if !ok || len(a) != len(b) {
			return []error{fmt.Errorf("%s: %d items became %v", path, len(b), after)}
		}
		var errs []error
		for i := range b {
			errs = append(errs, kept(fmt.Sprintf("%s[%d]", path, i), b[i], a[i])...)
		}
		return errs
	default:
		if before != after {
			return []error{fmt.Errorf("%s: %v became %v", path, before, after)}
		}
		return nil
	}
}
