package config

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/limits"
	"go.yaml.in/yaml/v3"
)

// Directory is the directory section: where the tenants, their plans and
// their API keys live. The policies always live in the file.
//
//	directory: {source: postgres, dsn_env: SLUICE_DATABASE_URL, refresh: 60s, snapshot: /var/lib/sluice/directory.json}
//
// With source postgres the file holds no default_plan, plans or tenants
// sections: the database does (see package admission/directory/pgdir).
type Directory struct {
	// Source is DirectoryFile (the default: the file's default_plan,
	// plans and tenants sections) or DirectoryPostgres.
	Source string
	// DSNEnv names the environment variable holding the database's
	// connection string (default SLUICE_DATABASE_URL): the file never
	// holds the password.
	DSNEnv string
	// Refresh is the period of the full reload that backs up the
	// change notifications (default 60s, at least 1s).
	Refresh time.Duration
	// Snapshot is the local file the last good directory is written to
	// and read from when the database cannot be reached at start-up;
	// empty means none (start-up then fails without the database).
	Snapshot string
}

// Directory sources.
const (
	DirectoryFile     = "file"
	DirectoryPostgres = "postgres"
)

// Defaults of the directory section.
const (
	DefaultDSNEnv  = "SLUICE_DATABASE_URL"
	DefaultRefresh = time.Minute
)

func (d *decoder) decodeDirectory(n *yaml.Node, path string) {
	dir := &d.f.Directory
	d.mapping(n, path,
		field{"source", d.str(&dir.Source)},
		field{"dsn_env", d.str(&dir.DSNEnv)},
		field{"refresh", d.duration(&dir.Refresh, false)},
		field{"snapshot", d.str(&dir.Snapshot)},
	)
	switch dir.Source {
	case DirectoryFile, DirectoryPostgres:
	default:
		d.errorf(d.lines[path+".source"], path+".source", "%q is not a source (want file or postgres)", dir.Source)
	}
	if dir.Refresh != 0 && dir.Refresh < time.Second {
		d.errorf(d.lines[path+".refresh"], path+".refresh", "must be at least 1s, got %v", dir.Refresh)
	}
	if dir.DSNEnv != "" && !validName(dir.DSNEnv) {
		d.errorf(d.lines[path+".dsn_env"], path+".dsn_env", "%q is not an environment variable name", dir.DSNEnv)
	}
	if dir.Source == DirectoryFile && (dir.DSNEnv != "" || dir.Refresh != 0 || dir.Snapshot != "") {
		d.errorf(d.lines[path], path, "dsn_env, refresh and snapshot apply to source postgres only")
	}
	if dir.DSNEnv == "" {
		dir.DSNEnv = DefaultDSNEnv
	}
	if dir.Refresh == 0 {
		dir.Refresh = DefaultRefresh
	}
}

// validateDirectory refuses tenants declared in the file when the
// directory lives elsewhere.
func (d *decoder) validateDirectory() {
	if d.f.Directory.Source != DirectoryPostgres {
		return
	}
	for _, sec := range []string{"default_plan", "plans", "tenants"} {
		if n, ok := d.lines[sec]; ok {
			d.errorf(n, sec, "not allowed with directory.source postgres: the database holds the plans and tenants (admitctl db import loads a file's)")
		}
	}
}

// A planProblem is one problem of a plan or tenant entry, by path.
type planProblem struct{ path, msg string }

// planProblems checks plans against the policies beyond what each
// override's own figures say: every override names a policy whose
// algorithm has the field, leaves room for the policy's largest request,
// and every plan named exists. anonymous is the anonymous tenant, which
// plans may not list.
func planProblems(pols []admission.Policy, pl *limits.Plans, anonymous string) []planProblem {
	var out []planProblem
	byName := make(map[string]*admission.Policy, len(pols))
	for i := range pols {
		if _, dup := byName[pols[i].Name]; !dup {
			byName[pols[i].Name] = &pols[i]
		}
	}
	check := func(path, pol string, o limits.Override) {
		p, ok := byName[pol]
		if !ok {
			out = append(out, planProblem{path, fmt.Sprintf("no such policy %q", pol)})
			return
		}
		if o.Burst > 0 && p.Algorithm != limits.TokenBucket {
			out = append(out, planProblem{path + ".burst", "only a token_bucket has a burst"})
		}
		if o.Per > 0 && (p.Algorithm == limits.Concurrency || p.Algorithm == limits.Quota && p.Period != limits.PeriodFixed) {
			out = append(out, planProblem{path + ".per", fmt.Sprintf("a %s policy has no per", p.Algorithm)})
		}
		if p.MaxCost > 0 {
			capacity := o.Limit
			if p.Algorithm == limits.TokenBucket && (o.Burst > 0 || p.Burst > 0) {
				capacity = max(o.Burst, p.Burst)
				if o.Burst > 0 {
					capacity = o.Burst
				}
			}
			if capacity > 0 && capacity < p.MaxCost {
				out = append(out, planProblem{path, fmt.Sprintf("%d is smaller than max_cost %d of policy %q: the largest request could never be admitted", capacity, p.MaxCost, pol)})
			}
		}
	}
	for plan, os := range pl.Plans {
		for pol, o := range os {
			check(join("plans."+plan, pol), pol, o)
		}
	}
	if pl.Default != "" {
		if _, ok := pl.Plans[pl.Default]; !ok {
			out = append(out, planProblem{"default_plan", fmt.Sprintf("no plan %q", pl.Default)})
		}
	}
	for tenant, tp := range pl.Tenants {
		path := "tenants." + tenant
		if tp.Plan != "" {
			if _, ok := pl.Plans[tp.Plan]; !ok {
				out = append(out, planProblem{path + ".plan", fmt.Sprintf("no plan %q", tp.Plan)})
			}
		}
		for pol, o := range tp.Overrides {
			check(path+".overrides."+pol, pol, o)
		}
		if tenant == anonymous {
			out = append(out, planProblem{path, fmt.Sprintf("%q is the anonymous tenant (identity.anonymous_tenant): callers without a key would share its limits", tenant)})
		}
	}
	return out
}

// Limits of directory entries that come from outside the file.
const (
	maxTenantName = 128
	maxUser       = 128
	maxPer        = 100 * 365 * 24 * time.Hour // limits' bound of a period
)

// CheckPlans checks plans held outside the file (a tenant directory's)
// against the file's policies with the messages Parse gives (and
// admitctl check prints): what CheckEntries checks, and that every
// override names a policy whose algorithm has its fields and leaves room
// for the policy's largest request, every plan named exists, and no
// tenant is the anonymous one. Each problem's Path names its entry
// (plans.<plan>.<policy>..., tenants.<tenant>..., default_plan) and its
// File is source. It returns nil when the plans are valid.
func (f *File) CheckPlans(source string, pl *limits.Plans) Errors {
	es := CheckEntries(source, pl)
	for _, p := range planProblems(f.Config.Policies, pl, f.Identity.AnonymousTenant) {
		es = append(es, &Error{File: source, Path: p.path, Msg: p.msg})
	}
	es.sort()
	return es
}

// CheckEntries checks what can be checked of plans held outside the file
// without the policies, as CheckPlans does (it is CheckPlans' first part,
// so that a program writing entries refuses what the programs reading
// them would): plan, tenant and policy names, and each override's
// figures (signs, bounds, at least one of limit, burst and per).
func CheckEntries(source string, pl *limits.Plans) Errors {
	var es Errors
	add := func(path, msg string) { es = append(es, &Error{File: source, Path: path, Msg: msg}) }
	figures := func(path, pol string, o limits.Override) {
		if !validName(pol) {
			add(path, fmt.Sprintf("%q is not a valid policy name", pol))
		}
		for _, a := range []struct {
			name string
			v    int64
		}{{"limit", o.Limit}, {"burst", o.Burst}} {
			switch {
			case a.v < 0:
				add(path+"."+a.name, fmt.Sprintf("must be > 0, got %d", a.v))
			case a.v > limits.MaxAmount:
				add(path+"."+a.name, fmt.Sprintf("must be <= %d (MaxAmount), got %d", limits.MaxAmount, a.v))
			}
		}
		if o.Per < 0 {
			add(path+".per", fmt.Sprintf("must be > 0, got %s", o.Per))
		}
		if o.Per > maxPer {
			add(path+".per", fmt.Sprintf("must be at most 100 years, got %v", o.Per))
		}
		if o == (limits.Override{}) {
			add(path, "an override needs limit, burst or per")
		}
	}
	for plan, os := range pl.Plans {
		if !validName(plan) {
			add("plans."+plan, fmt.Sprintf("%q is not a valid plan name", plan))
		}
		for pol, o := range os {
			figures(join("plans."+plan, pol), pol, o)
		}
	}
	for tenant, tp := range pl.Tenants {
		if !ValidTenant(tenant) {
			add("tenants."+tenant, fmt.Sprintf("%q is not a valid tenant name (1 to %d printable characters)", tenant, maxTenantName))
		}
		for pol, o := range tp.Overrides {
			figures("tenants."+tenant+".overrides."+pol, pol, o)
		}
	}
	es.sort()
	return es
}

// ValidTenant reports whether s can name a tenant held outside the file:
// 1 to 128 bytes of printable UTF-8.
func ValidTenant(s string) bool {
	return s != "" && len(s) <= maxTenantName && printable(s)
}

// ValidUser reports whether s can name a key's end user: at most 128
// bytes of printable UTF-8.
func ValidUser(s string) bool { return len(s) <= maxUser && printable(s) }

// ValidKeyID reports whether s can be a key's id.
func ValidKeyID(s string) bool { return validName(s) }

func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	return !strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) })
}
