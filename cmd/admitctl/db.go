package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/jackc/pgx/v5"
	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/admission/directory"
	"github.com/sluicehq/sluice/admission/directory/pgdir"
	"github.com/sluicehq/sluice/admission/limits"
)

const dbUsage = `SUBCOMMAND [ARGS]

  migrate                                   create or update the schema (idempotent)
  tenant add NAME [PLAN]                    add a tenant (on PLAN; default: the default plan)
  tenant list                               list the tenants with their plan, overrides and live keys
  tenant plan NAME PLAN                     move a tenant to another plan ("-": the default plan)
  plan set NAME POLICY limit=N [burst=N] [per=D]
                                            set a plan's limits for one policy (creates the plan)
  plan default NAME                         make NAME, an existing plan, the default plan
  override set TENANT POLICY limit=N [burst=N] [per=D]
                                            give a tenant its own limits for one policy
  override clear TENANT POLICY              remove them
  key create TENANT [ID [USER]]             create an API key: printed once, stored hashed
  key revoke ID                             revoke a key (refused by every listening gateway within 1s)
  export                                    print the directory as a policy file's plans and tenants
                                            (exit 1 when rows that cannot be read are left out)
  import FILE                               write a policy file's plans, tenants and keys to the database`

func init() {
	register(&command{
		name:    "db",
		usage:   dbUsage,
		summary: "manage the tenant directory in PostgreSQL (directory.source postgres). The database is -dsn, else $SLUICE_DATABASE_URL. A row the gateways would refuse (a sign, a name, a unit) is refused, nothing written; with -f, a change is also checked against the policy file's policies, with admitctl check's messages, and refused if it does not fit",
		run:     runDB,
	})
}

func runDB(ctx context.Context, e *env, fs *flag.FlagSet, args []string) int {
	dsn := fs.String("dsn", "", "the database's connection string (default $SLUICE_DATABASE_URL)")
	policy := fs.String("f", "", "policy `FILE` whose policies changes are checked against (needed by import of an export)")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	args = fs.Args()
	if len(args) == 0 {
		fs.Usage()
		return 2
	}
	if *dsn == "" {
		*dsn = os.Getenv(config.DefaultDSNEnv)
	}
	if *dsn == "" {
		fmt.Fprintf(e.stderr, "admitctl db: no database: give -dsn or set %s\n", config.DefaultDSNEnv)
		return 2
	}
	var f *config.File
	if *policy != "" {
		var err error
		if f, err = config.Load(*policy); err != nil {
			fmt.Fprintf(e.stderr, "admitctl db: %v\n", err)
			return 1
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(cctx, *dsn)
	if err != nil {
		fmt.Fprintf(e.stderr, "admitctl db: %v\n", err)
		return 1
	}
	defer conn.Close(context.Background())
	d := &dbCmd{ctx: cctx, conn: conn, file: f, out: e.stdout, err: e.stderr}
	err = d.run(args)
	var usageErr errUsage
	switch {
	case errors.As(err, &usageErr):
		fmt.Fprintf(e.stderr, "admitctl db: %v\n\n", err)
		fs.Usage()
		return 2
	case err != nil:
		fmt.Fprintf(e.stderr, "admitctl db: %v\n", err)
		return 1
	}
	return 0
}

type errUsage string

func (e errUsage) Error() string { return string(e) }

// dbCmd runs one db subcommand.
type dbCmd struct {
	ctx      context.Context
	conn     *pgx.Conn
	file     *config.File // nil without -f
	out, err io.Writer
}

func (d *dbCmd) run(args []string) error {
	sub := strings.Join(args[:min(2, len(args))], " ")
	if args[0] == "migrate" || args[0] == "export" || args[0] == "import" {
		sub = args[0]
	}
	n := len(strings.Fields(sub))
	rest := args[n:]
	need := func(lo, hi int) error {
		if len(rest) < lo || len(rest) > hi {
			return errUsage(fmt.Sprintf("%s: wrong number of arguments", sub))
		}
		return nil
	}
	switch sub {
	case "migrate":
		if err := need(0, 0); err != nil {
			return err
		}
		applied, err := pgdir.Migrate(d.ctx, d.conn)
		if err != nil {
			return err
		}
		if len(applied) == 0 {
			fmt.Fprintln(d.out, "schema up to date")
		}
		for _, v := range applied {
			fmt.Fprintf(d.out, "applied migration %d\n", v)
		}
		return nil
	case "tenant add":
		if err := need(1, 2); err != nil {
			return err
		}
		plan := ""
		if len(rest) == 2 {
			plan = rest[1]
		}
		return d.checked(func(pl *limits.Plans) {
			pl.Tenants[rest[0]] = limits.TenantPlan{Plan: plan, Overrides: pl.Tenants[rest[0]].Overrides}
		},
			"tenants."+rest[0], func() error { return pgdir.AddTenant(d.ctx, d.conn, rest[0], plan) })
	case "tenant list":
		if err := need(0, 0); err != nil {
			return err
		}
		rows, err := pgdir.ListTenants(d.ctx, d.conn, 0)
		if err != nil {
			return err
		}
		w := tabwriter.NewWriter(d.out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "TENANT\tPLAN\tOVERRIDES\tKEYS")
		for _, r := range rows {
			fmt.Fprintf(w, "%s\t%s\t%d\t%d\n", r.Name, cmp.Or(r.Plan, "(default)"), r.Overrides, r.Keys)
		}
		return w.Flush()
	case "tenant plan":
		if err := need(2, 2); err != nil {
			return err
		}
		plan := rest[1]
		if plan == "-" {
			plan = ""
		}
		return d.checked(func(pl *limits.Plans) { tp := pl.Tenants[rest[0]]; tp.Plan = plan; pl.Tenants[rest[0]] = tp },
			"tenants."+rest[0], func() error { return pgdir.SetTenantPlan(d.ctx, d.conn, rest[0], plan) })
	case "plan set":
		if len(rest) < 3 {
			return errUsage("plan set: want NAME POLICY limit=N [burst=N] [per=D]")
		}
		o, err := parseOverride(rest[2:])
		if err != nil {
			return err
		}
		plan, pol := rest[0], rest[1]
		return d.checked(func(pl *limits.Plans) {
			os := map[string]limits.Override{}
			for k, v := range pl.Plans[plan] {
				os[k] = v
			}
			os[pol] = o
			pl.Plans[plan] = os
		}, "plans."+plan, func() error { return pgdir.SetPlan(d.ctx, d.conn, plan, map[string]limits.Override{pol: o}, false) })
	case "plan default":
		if err := need(1, 1); err != nil {
			return err
		}
		return d.checked(func(pl *limits.Plans) { pl.Default = rest[0] }, "default_plan",
			func() error { return pgdir.SetDefaultPlan(d.ctx, d.conn, rest[0]) })
	case "override set", "override clear":
		if len(rest) < 2 || (sub == "override clear") != (len(rest) == 2) {
			return errUsage(sub + ": want TENANT POLICY" + map[bool]string{true: "", false: " limit=N [burst=N] [per=D]"}[sub == "override clear"])
		}
		var o limits.Override
		if sub == "override set" {
			var err error
			if o, err = parseOverride(rest[2:]); err != nil {
				return err
			}
		}
		tenant, pol := rest[0], rest[1]
		return d.checked(func(pl *limits.Plans) {
			tp := pl.Tenants[tenant]
			os := map[string]limits.Override{}
			for k, v := range tp.Overrides {
				os[k] = v
			}
			if o == (limits.Override{}) {
				delete(os, pol)
			} else {
				os[pol] = o
			}
			tp.Overrides = os
			pl.Tenants[tenant] = tp
		}, "tenants."+tenant, func() error { return pgdir.SetOverride(d.ctx, d.conn, tenant, pol, o) })
	case "key create":
		if err := need(1, 3); err != nil {
			return err
		}
		var id, user string
		if len(rest) > 1 {
			id = rest[1]
		}
		if len(rest) > 2 {
			user = rest[2]
		}
		key, id, err := pgdir.CreateKey(d.ctx, d.conn, rest[0], id, user)
		if err != nil {
			return err
		}
		fmt.Fprintf(d.out, "%s\n", key)
		fmt.Fprintf(d.out, "key id %s for tenant %s: the key is shown this once and stored only as its hash\n", id, rest[0])
		return nil
	case "key revoke":
		if err := need(1, 1); err != nil {
			return err
		}
		if err := pgdir.RevokeKey(d.ctx, d.conn, rest[0]); err != nil {
			return err
		}
		fmt.Fprintf(d.out, "revoked key %s\n", rest[0])
		return nil
	case "export":
		if err := need(0, 0); err != nil {
			return err
		}
		data, problems, err := pgdir.Load(d.ctx, d.conn)
		if err != nil {
			return err
		}
		for _, p := range problems {
			fmt.Fprintf(d.err, "left out: %v\n", p)
		}
		if err := writeExport(d.out, data); err != nil {
			return err
		}
		if len(problems) > 0 {
			return fmt.Errorf("%d rows left out of the export (listed above): they cannot be read as entries, and the gateways refuse them too", len(problems))
		}
		return nil
	case "import":
		if err := need(1, 1); err != nil {
			return err
		}
		data, err := readImport(rest[0], d.file)
		if err != nil {
			return err
		}
		if err := pgdir.Import(d.ctx, d.conn, data); err != nil {
			return err
		}
		fmt.Fprintf(d.out, "imported %d plans, %d tenants, %d keys\n", len(data.Plans.Plans), len(data.Plans.Tenants), len(data.Keys))
		return nil
	}
	return errUsage(fmt.Sprintf("unknown subcommand %q", sub))
}

// checked runs write after checking, with -f, the directory as change
// makes it: the problems under path (the entry changed) refuse it.
func (d *dbCmd) checked(change func(*limits.Plans), path string, write func() error) error {
	if d.file != nil {
		data, _, err := pgdir.Load(d.ctx, d.conn)
		if err != nil {
			return err
		}
		change(&data.Plans)
		var mine config.Errors
		for _, e := range d.file.CheckPlans("postgres", &data.Plans) {
			if e.Path == path || strings.HasPrefix(e.Path, path+".") {
				mine = append(mine, e)
			}
		}
		if len(mine) > 0 {
			return fmt.Errorf("refused, nothing written:\n%w", mine)
		}
	}
	return write()
}

// parseOverride reads limit=N burst=N per=D, each at most once. A zero is
// refused: the database reads it as "keep the policy's own figure", which
// is what leaving the field out says. The figures' other checks are the
// gateways' own, made by pgdir before anything is written.
func parseOverride(args []string) (limits.Override, error) {
	var o limits.Override
	seen := map[string]bool{}
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		if !ok {
			return o, errUsage(fmt.Sprintf("%q: want limit=N, burst=N or per=D", a))
		}
		if seen[k] {
			return o, fmt.Errorf("%s given twice", k)
		}
		seen[k] = true
		var err error
		zero := false
		switch k {
		case "limit":
			o.Limit, err = strconv.ParseInt(strings.ReplaceAll(v, "_", ""), 10, 64)
			zero = o.Limit == 0
		case "burst":
			o.Burst, err = strconv.ParseInt(strings.ReplaceAll(v, "_", ""), 10, 64)
			zero = o.Burst == 0
		case "per":
			o.Per, err = time.ParseDuration(v)
			zero = o.Per == 0
		default:
			return o, errUsage(fmt.Sprintf("%q: want limit, burst or per", k))
		}
		if err != nil {
			return o, fmt.Errorf("%s: %q is not a number or duration", k, v)
		}
		if zero {
			return o, fmt.Errorf("%s: must be > 0, got %s (leave it out to keep the policy's own figure)", k, v)
		}
	}
	if o == (limits.Override{}) {
		return o, errUsage("an override needs limit, burst or per")
	}
	return o, nil
}

// The export format: a policy file's default_plan, plans and tenants.
type (
	exportOverride struct {
		Limit int64  `yaml:"limit,omitempty"`
		Burst int64  `yaml:"burst,omitempty"`
		Per   string `yaml:"per,omitempty"`
	}
	exportKey struct {
		Hash string `yaml:"hash"`
		ID   string `yaml:"id"`
		User string `yaml:"user,omitempty"`
	}
	exportTenant struct {
		Plan      string                    `yaml:"plan,omitempty"`
		Overrides map[string]exportOverride `yaml:"overrides,omitempty"`
		APIKeys   []exportKey               `yaml:"api_keys,omitempty"`
	}
	exportFile struct {
		DefaultPlan string                               `yaml:"default_plan,omitempty"`
		Plans       map[string]map[string]exportOverride `yaml:"plans,omitempty"`
		Tenants     map[string]exportTenant              `yaml:"tenants,omitempty"`
	}
)

func exportOverrides(os map[string]limits.Override) map[string]exportOverride {
	if len(os) == 0 {
		return nil
	}
	out := make(map[string]exportOverride, len(os))
	for pol, o := range os {
		e := exportOverride{Limit: o.Limit, Burst: o.Burst}
		if o.Per > 0 {
			e.Per = o.Per.String()
		}
		out[pol] = e
	}
	return out
}

// writeExport writes d as YAML in the policy file's shape: the bytes the
// yaml.v3 encoder gives for the whole exportFile, written a plan and a
// tenant at a time (the encoder keeps every event of a document, which
// made a 100,000-tenant export take seconds). An entry whose every string
// the encoder writes as it is (plainYAML) is written directly; any other
// is encoded on its own.
func writeExport(w io.Writer, d *directory.Data) error {
	keys := make(map[string][]exportKey)
	for h, k := range d.Keys {
		keys[k.Tenant] = append(keys[k.Tenant], exportKey{Hash: h.String(), ID: k.KeyID, User: k.User})
	}
	tenants := make([]string, 0, len(d.Plans.Tenants)+len(keys))
	for tenant := range d.Plans.Tenants {
		tenants = append(tenants, tenant)
	}
	for tenant := range keys {
		if _, ok := d.Plans.Tenants[tenant]; !ok {
			tenants = append(tenants, tenant)
		}
	}
	plans := sortedYAMLKeys(slices.Collect(maps.Keys(d.Plans.Plans)))
	tenants = sortedYAMLKeys(tenants)

	p := exportPart{w: bufio.NewWriter(w)}
	p.WriteString("# The tenant directory, as a policy file's default_plan, plans and tenants sections.\n")
	if d.Plans.Default == "" && len(plans) == 0 && len(tenants) == 0 {
		p.encode(&exportFile{})
	}
	if d.Plans.Default != "" {
		p.encode(&exportFile{DefaultPlan: d.Plans.Default})
	}
	if len(plans) > 0 {
		p.WriteString("plans:\n")
	}
	for _, plan := range plans {
		os := exportOverrides(d.Plans.Plans[plan])
		if !p.plan(plan, os) {
			if os == nil {
				os = map[string]exportOverride{}
			}
			p.entry(&exportFile{Plans: map[string]map[string]exportOverride{plan: os}})
		}
	}
	if len(tenants) > 0 {
		p.WriteString("tenants:\n")
	}
	for _, tenant := range tenants {
		tp := d.Plans.Tenants[tenant]
		ks := keys[tenant]
		slices.SortFunc(ks, func(a, b exportKey) int { return strings.Compare(a.ID, b.ID) })
		t := exportTenant{Plan: tp.Plan, Overrides: exportOverrides(tp.Overrides), APIKeys: ks}
		if !p.tenant(tenant, t) {
			p.entry(&exportFile{Tenants: map[string]exportTenant{tenant: t}})
		}
	}
	if p.err != nil {
		return p.err
	}
	return p.w.Flush()
}

// An exportPart writes the export a section or an entry at a time.
type exportPart struct {
	w   *bufio.Writer
	buf bytes.Buffer
	err error
}

// WriteString writes s.
func (p *exportPart) WriteString(s string) {
	p.w.WriteString(s) //nolint:errcheck // Flush returns the error
}

// plan writes a plan's entry of the plans section, and reports whether
// it did: not when a string needs the encoder.
func (p *exportPart) plan(name string, os map[string]exportOverride) bool {
	if !plainYAML(name) || !plainOverrides(os) {
		return false
	}
	p.WriteString("  " + name + ":")
	if len(os) == 0 {
		p.WriteString(" {}\n")
		return true
	}
	p.WriteString("\n")
	p.overrides("    ", os)
	return true
}

// tenant writes a tenant's entry of the tenants section, and reports
// whether it did: not when a string needs the encoder.
func (p *exportPart) tenant(name string, t exportTenant) bool {
	if !plainYAML(name) || t.Plan != "" && !plainYAML(t.Plan) || !plainOverrides(t.Overrides) {
		return false
	}
	for _, k := range t.APIKeys {
		if !plainYAML(k.Hash) || !plainYAML(k.ID) || k.User != "" && !plainYAML(k.User) {
			return false
		}
	}
	p.WriteString("  " + name + ":")
	if t.Plan == "" && len(t.Overrides) == 0 && len(t.APIKeys) == 0 {
		p.WriteString(" {}\n")
		return true
	}
	p.WriteString("\n")
	if t.Plan != "" {
		p.WriteString("    plan: " + t.Plan + "\n")
	}
	if len(t.Overrides) > 0 {
		p.WriteString("    overrides:\n")
		p.overrides("      ", t.Overrides)
	}
	if len(t.APIKeys) > 0 {
		p.WriteString("    api_keys:\n")
	}
	for _, k := range t.APIKeys {
		p.WriteString("      - hash: " + k.Hash + "\n        id: " + k.ID + "\n")
		if k.User != "" {
			p.WriteString("        user: " + k.User + "\n")
		}
	}
	return true
}

// overrides writes os, by policy, at indent.
func (p *exportPart) overrides(indent string, os map[string]exportOverride) {
	for _, pol := range sortedYAMLKeys(slices.Collect(maps.Keys(os))) {
		o := os[pol]
		p.WriteString(indent + pol + ":")
		if o == (exportOverride{}) {
			p.WriteString(" {}\n")
			continue
		}
		p.WriteString("\n")
		if o.Limit != 0 {
			p.WriteString(indent + "  limit: " + strconv.FormatInt(o.Limit, 10) + "\n")
		}
		if o.Burst != 0 {
			p.WriteString(indent + "  burst: " + strconv.FormatInt(o.Burst, 10) + "\n")
		}
		if o.Per != "" {
			p.WriteString(indent + "  per: " + o.Per + "\n")
		}
	}
}

// plainOverrides reports whether the encoder writes os's policies and
// periods as they are.
func plainOverrides(os map[string]exportOverride) bool {
	for pol, o := range os {
		if !plainYAML(pol) || o.Per != "" && !plainDuration(o.Per) {
			return false
		}
	}
	return true
}

// plainYAML reports whether the yaml.v3 encoder surely writes s as it is,
// as a key or a value: an ASCII letter, then up to 99 letters, digits,
// '.', '_', '-' and ':' (not last), and not a word YAML reads as a
// boolean or null.
func plainYAML(s string) bool {
	if s == "" || len(s) > 100 || !('a' <= s[0] && s[0] <= 'z' || 'A' <= s[0] && s[0] <= 'Z') || s[len(s)-1] == ':' {
		return false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-' || c == ':') {
			return false
		}
	}
	switch strings.ToLower(s) {
	case "y", "n", "yes", "no", "on", "off", "true", "false", "null":
		return false
	}
	return true
}

// plainDuration reports whether s, a time.Duration's String, is written
// as it is: digits, '.', units, ending in s (never a YAML number).
func plainDuration(s string) bool {
	if !strings.HasSuffix(s, "s") {
		return false
	}
	for _, r := range s {
		if !strings.ContainsRune("0123456789.hmsnuµ", r) {
			return false
		}
	}
	return true
}

// entry writes the encoding of x, a section holding one entry, without
// the section's name (its first line).
func (p *exportPart) entry(x *exportFile) {
	if b := p.yaml(x); b != nil {
		p.w.Write(b[bytes.IndexByte(b, '\n')+1:]) //nolint:errcheck // Flush returns the error
	}
}

// encode writes the encoding of x.
func (p *exportPart) encode(x *exportFile) {
	p.w.Write(p.yaml(x)) //nolint:errcheck // Flush returns the error
}

// yaml returns the encoding of x (nil after an error, kept in p.err).
func (p *exportPart) yaml(x *exportFile) []byte {
	if p.err != nil {
		return nil
	}
	p.buf.Reset()
	enc := yaml.NewEncoder(&p.buf)
	enc.SetIndent(2)
	if p.err = enc.Encode(x); p.err == nil {
		p.err = enc.Close()
	}
	if p.err != nil {
		return nil
	}
	return p.buf.Bytes()
}

// sortedYAMLKeys sorts keys as the yaml.v3 encoder orders a map's keys
// (go.yaml.in/yaml/v3 keyList.Less, for string keys: letters before
// other characters, runs of digits by their value) and returns them.
func sortedYAMLKeys(keys []string) []string {
	type key struct {
		s string
		r []rune
	}
	ks := make([]key, len(keys))
	for i, k := range keys {
		ks[i] = key{k, []rune(k)}
	}
	slices.SortFunc(ks, func(a, b key) int {
		switch {
		case yamlKeyLess(a.r, b.r):
			return -1
		case yamlKeyLess(b.r, a.r):
			return 1
		}
		return 0
	})
	for i, k := range ks {
		keys[i] = k.s
	}
	return keys
}

// yamlKeyLess is keyList.Less of two string keys, as runes.
func yamlKeyLess(ar, br []rune) bool {
	digits := false
	for i := 0; i < len(ar) && i < len(br); i++ {
		if ar[i] == br[i] {
			digits = unicode.IsDigit(ar[i])
			continue
		}
		al := unicode.IsLetter(ar[i])
		bl := unicode.IsLetter(br[i])
		if al && bl {
			return ar[i] < br[i]
		}
		if al || bl {
			if digits {
				return al
			}
			return bl
		}
		var ai, bi int
		var an, bn int64
		if ar[i] == '0' || br[i] == '0' {
			for j := i - 1; j >= 0 && unicode.IsDigit(ar[j]); j-- {
				if ar[j] != '0' {
					an = 1
					bn = 1
					break
				}
			}
		}
		for ai = i; ai < len(ar) && unicode.IsDigit(ar[ai]); ai++ {
			an = an*10 + int64(ar[ai]-'0')
		}
		for bi = i; bi < len(br) && unicode.IsDigit(br[bi]); bi++ {
			bn = bn*10 + int64(br[bi]-'0')
		}
		if an != bn {
			return an < bn
		}
		if ai != bi {
			return ai < bi
		}
		return ar[i] < br[i]
	}
	return len(ar) < len(br)
}

// readImport reads the directory to import: the plans, tenants and keys
// of a whole policy file, or of an export checked with the policies of
// pf (-f). A file in the export's shape is parsed once, by the policy
// file parser: the policy file's sections are appended to its text,
// which keeps its lines (errors name them); a file of another shape is
// merged as a document and encoded again.
func readImport(path string, pf *config.File) (*directory.Data, error) {
	data, err := config.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc yaml.Node
	block, hasPolicies := topKeys(data)
	if !block {
		if err := yaml.Unmarshal(data, &doc); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
			return nil, fmt.Errorf("%s: not a mapping", path)
		}
		root := doc.Content[0]
		for i := 0; i+1 < len(root.Content); i += 2 {
			hasPolicies = hasPolicies || root.Content[i].Value == "policies"
		}
	}
	if !hasPolicies {
		if pf == nil {
			return nil, fmt.Errorf("%s has no policies: give the policy file with -f to check it against", path)
		}
		// The export's sections with the policy file's policies and
		// identity, read by the policy file parser.
		src, err := os.ReadFile(pf.Source)
		if err != nil {
			return nil, err
		}
		var pdoc yaml.Node
		if err := yaml.Unmarshal(src, &pdoc); err != nil {
			return nil, err
		}
		proot := pdoc.Content[0]
		borrowed := &yaml.Node{Kind: yaml.MappingNode}
		for i := 0; i+1 < len(proot.Content); i += 2 {
			switch proot.Content[i].Value {
			case "policies", "identity", "stores":
				borrowed.Content = append(borrowed.Content, proot.Content[i], proot.Content[i+1])
			}
		}
		if block {
			sections, err := yaml.Marshal(borrowed)
			if err != nil {
				return nil, err
			}
			if len(data) > 0 && data[len(data)-1] != '\n' {
				data = append(data, '\n')
			}
			data = append(data, sections...)
		} else {
			root := doc.Content[0]
			root.Content = append(root.Content, borrowed.Content...)
			if data, err = yaml.Marshal(&doc); err != nil {
				return nil, err
			}
		}
	}
	f, err := config.Parse(path, data)
	if err != nil {
		return nil, err
	}
	if f.Directory.Source == config.DirectoryPostgres {
		return nil, fmt.Errorf("%s: its directory is already in the database (directory.source postgres)", path)
	}
	return directory.FromFile(f), nil
}

// topKeys reads from data's text what readImport needs of its top-level
// keys, without parsing it. block reports whether data is a block mapping
// whose first line (after comments and a "---") is a plain key at the
// first column, as an export's is; then a line starting with a key at the
// first column is a top-level key, and policies reports whether one is
// policies. A key the reading misses (a quoted "policies") is then
// given twice, which the parser refuses.
func topKeys(data []byte) (block, policies bool) {
	for line := range bytes.Lines(data) {
		if !block {
			t := bytes.TrimSpace(line)
			if len(t) == 0 || t[0] == '#' || string(t) == "---" {
				continue
			}
			if !plainKeyLine.Match(line) {
				return false, false
			}
			block = true
		}
		if rest, ok := bytes.CutPrefix(line, []byte("policies")); ok && bytes.HasPrefix(bytes.TrimLeft(rest, " \t"), []byte(":")) {
			policies = true
		}
	}
	return block, policies
}

// plainKeyLine matches a line starting with a plain key at the first
// column.
var plainKeyLine = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*:(\s|$)`)
