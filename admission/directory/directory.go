// Package directory holds the tenant directory in memory: the tenants with
// their plan and own overrides, the plans with their per-policy limits,
// and the API keys by hash (key id, user, tenant). The request path reads
// it from memory only, in the snapshot its Target decides requests with
// (httpadmit.Snapshot, the gateway's): a whole directory makes a new
// snapshot with the policy file (Target.Apply), a change of one tenant or
// one key a snapshot sharing all the rest with the one in force
// (Target.SetTenant, Target.SetKey: one shard of the tenants' limits or
// of the keys copied, admission.PolicySet.WithTenant and
// httpadmit.KeySet), so that a request never sees a tenant's keys and
// limits from two versions of the directory.
//
// The policy file is one home of a directory (its default_plan, plans and
// tenants sections, today's behaviour and the default: FromFile); a
// database is another (package pgdir, with directory.source postgres in
// the file). The policies themselves always come from the policy file.
//
// A Directory sits between the policy file watcher and the program's
// subscriber (the gateway, the middleware): Apply takes a policy file,
// Install a whole directory, SetTenant and SetKey one entry. Entries that
// do not validate against the file's policies are refused one by one,
// with the messages admitctl check gives, and the rest is installed.
//
// Optional collaborators are options: WithLogger; see
// docs/concepts.md#constructors.
package directory

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unicode"
	"unicode/utf8"

	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/admission/reload"
)

// Data is a whole directory as plain data.
type Data struct {
	// Plans holds the default plan, the plans' overrides by policy and
	// the tenants' plans and own overrides.
	Plans limits.Plans
	// Keys maps the hashes of the live (not revoked) API keys to their
	// callers.
	Keys map[apikey.Hash]apikey.Identity
}

// FromFile returns the directory a policy file holds.
func FromFile(f *config.File) *Data {
	return &Data{Plans: f.Config.Plans, Keys: f.Identity.Keys}
}

// Clone returns a copy of d sharing nothing with it but the override maps,
// which are never changed in place.
func (d *Data) Clone() *Data {
	return &Data{
		Plans: limits.Plans{Default: d.Plans.Default, Plans: maps.Clone(d.Plans.Plans), Tenants: maps.Clone(d.Plans.Tenants)},
		Keys:  maps.Clone(d.Keys),
	}
}

// A Target is where a Directory installs: a program's snapshot of its
// configuration (httpadmitfile.Middleware, the gateway). Each method makes
// one new snapshot and installs it whole, or fails and changes nothing.
type Target interface {
	// Apply installs a policy file with the directory's plans and keys.
	Apply(f *config.File) error
	// SetTenant changes one tenant's plan and overrides (tp nil removes
	// it), keeping the others and every partition.
	SetTenant(tenant string, tp *limits.TenantPlan) error
	// SetKey adds or replaces one API key (k nil revokes it).
	SetKey(h apikey.Hash, k *apikey.Identity) error
}

// Config configures a Directory.
type Config struct {
	// Source names the directory in the problems reported ("postgres").
	Source string
}

// An Option sets an optional collaborator of a Directory.
type Option func(*Directory)

// WithLogger sets the logger of the entries a reloaded policy file
// refuses; nil means slog.Default(), the default.
func WithLogger(l *slog.Logger) Option {
	return func(d *Directory) {
		if l != nil {
			d.log = l
		}
	}
}

// Directory is the in-memory directory of a running program.
type Directory struct {
	next   Target
	source string
	log    *slog.Logger

	mu   sync.Mutex // serialises changes
	file *config.File
	data *Data // what is installed: valid entries only
	// given is the directory as given (the last Install's data and the
	// changes since), refused entries included, which a policy file
	// applied is checked against; data while none is refused.
	given    *Data
	refused  map[string]int // problems of the entries refused now, by entry (see check)
	nrefused atomic.Int64   // the sum of refused
}

// New returns an empty Directory installing into next: where policy
// files are installed, with their plans and keys taken from the
// directory, and where changes of one entry go. Apply gives it its
// policy file.
func New(next Target, cfg Config, opts ...Option) (*Directory, error) {
	if next == nil {
		return nil, errors.New("directory: a Target is required")
	}
	d := &Directory{next: next, source: cfg.Source, log: slog.Default(), data: &Data{}, refused: map[string]int{}}
	d.given = d.data
	for _, o := range opts {
		o(d)
	}
	return d, nil
}

// Data returns a copy of the directory installed.
func (d *Directory) Data() *Data {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.data.Clone()
}

// Apply installs a policy file, as a reload.Subscriber: its policies with
// the directory's plans. The whole directory as given is checked against
// the file (the last Install's data and the changes since, entries an
// earlier file refused included: a file that accepts them installs
// them). Entries the new policies refuse are left out, logged, each with
// its path, and counted (Refused) while the file is installed, and Apply
// returns a *reload.PartialError without a Section wrapping a
// *RefusedError: the watcher reports the file applied without them (the
// status page's warning, admission_reloads_total{result="partial"}). Where the directory lives changes with a restart: a
// reloaded file whose directory section changed is installed with the
// running section (and without the file's default_plan, plans and
// tenants, which the change would bring), and the change is logged as
// refused and returned as a *reload.PartialError (section "directory":
// the watcher reports the file applied without it) at each such reload
// until the section is restored or the program restarts; that error
// comes first when both happen.
func (d *Directory) Apply(f *config.File) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	var partial error
	if d.file != nil && f.Directory != d.file.Directory {
		d.log.Error("policy file applied without its directory section: the section changed, and a restart applies it",
			"file", f.Source, "running", describe(d.file.Directory), "refused", describe(f.Directory))
		// What was refused first: a status page bounds the message.
		partial = &reload.PartialError{Section: "directory", Err: fmt.Errorf("%s refused, a restart applies it; running %s",
			describe(f.Directory), describe(d.file.Directory))}
		kept := *f
		kept.Directory = d.file.Directory
		f = &kept
	}
	err := d.installLocked(f, d.given)
	var es config.Errors
	if errors.Is(err, ErrRefused) && d.file == f && errors.As(err, &es) {
		slices.SortFunc(es, func(a, b *config.Error) int { return strings.Compare(a.Path, b.Path) })
		re := &RefusedError{Source: d.source, Problems: es}
		d.log.Warn("directory entries refused by the policy file", "source", d.source, "problems", len(es), "first", re.Error())
		err = &reload.PartialError{Err: re}
		if partial == nil {
			return err
		}
		return errors.Join(partial, err)
	}
	if err != nil {
		return err
	}
	return partial
}

// A RefusedError reports the entries of a directory that a policy file
// refuses while the file and the rest of the directory are installed.
// It matches ErrRefused, and its Problems are a config.Errors for
// errors.As.
type RefusedError struct {
	// Source names the directory ("postgres").
	Source string
	// Problems are every problem, each naming its entry by its path.
	Problems config.Errors
}

// maxShown is the most problems a RefusedError's message names.
const maxShown = 3

// Error says how many problems the entries have and names the first
// maxShown, in the order of their paths (quoted when not printable),
// each in at most 200 bytes: a status page or a log line stays short
// whatever the directory holds.
func (e *RefusedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d problems", len(e.Problems))
	if e.Source != "" {
		fmt.Fprintf(&b, " (%s)", e.Source)
	}
	b.WriteString(": ")
	for i, p := range e.Problems[:min(len(e.Problems), maxShown)] {
		if i > 0 {
			b.WriteString("; ")
		}
		msg := quoted(p.Path) + ": " + p.Msg
		if len(msg) > 200 {
			msg = strings.ToValidUTF8(msg[:200], "") + "…"
		}
		b.WriteString(msg)
	}
	if n := len(e.Problems) - maxShown; n > 0 {
		fmt.Fprintf(&b, " (and %d more)", n)
	}
	return b.String()
}

// quoted returns path as it is, or quoted when it holds what is not
// printable UTF-8 (a name written into the database by another tool):
// no control character reaches a status page or a log line.
func quoted(path string) string {
	if utf8.ValidString(path) && !strings.ContainsFunc(path, func(r rune) bool { return !unicode.IsPrint(r) }) {
		return path
	}
	return strconv.Quote(path)
}

// Unwrap returns ErrRefused and the problems.
func (e *RefusedError) Unwrap() []error { return []error{ErrRefused, e.Problems} }

// Refused returns the problems of the entries refused now: by the last
// whole install (Install, or Apply of a policy file, which checks the
// whole directory against the file's policies), and by the SetTenant and
// SetKey calls since, each of which clears its entry's problems when it
// installs it.
func (d *Directory) Refused() int64 { return d.nrefused.Load() }

// describe says where a directory section puts the directory.
func describe(s config.Directory) string {
	if s.Source != config.DirectoryPostgres {
		return "source " + cmp.Or(s.Source, config.DirectoryFile)
	}
	return fmt.Sprintf("source postgres, dsn_env %s, refresh %v, snapshot %q", s.DSNEnv, s.Refresh, s.Snapshot)
}

// ErrRefused is matched by the errors of Install and Apply that report
// entries refused while the rest was installed.
var ErrRefused = errors.New("directory entries refused")

// Install installs a whole directory (a load, a refresh) with the last
// policy file applied. The valid entries are installed; the refused ones
// are reported, each by its path (plans.<plan>.<policy>,
// tenants.<tenant>..., default_plan), in an error wrapping ErrRefused and
// a config.Errors. The Directory keeps data: the caller must not change it
// afterwards.
func (d *Directory) Install(data *Data) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.file == nil {
		return errors.New("directory: Install before Apply")
	}
	return d.installLocked(d.file, data)
}

func (d *Directory) installLocked(f *config.File, data *Data) error {
	valid, byEntry, refused := d.check(f, data)
	if valid == nil {
		return refused
	}
	merged := *f
	merged.Config.Plans = valid.Plans
	// Next may keep the file it installs (and read its plans) while
	// SetTenant changes the directory's own map.
	merged.Config.Plans.Tenants = maps.Clone(valid.Plans.Tenants)
	merged.Identity.Keys = valid.Keys
	if err := d.next.Apply(&merged); err != nil {
		return err
	}
	d.file, d.data, d.given = f, valid, data
	d.refused = byEntry
	d.nrefused.Store(int64(refusedSum(byEntry)))
	return refused
}

// maxPasses bounds the passes of check: a plan refused makes the
// tenants on it, and the default plan, name no plan, which the next pass
// refuses; nothing refused then makes another entry wrong.
const maxPasses = 4

// check returns the valid part of data, the problems of the rest counted
// by entry ("tenant:<name>", "key:<hash>", else the problem's path), and
// those problems; a nil Data when the problems cannot be told apart by
// entry. An entry that refers to one refused (a tenant on a plan refused)
// is refused too.
func (d *Directory) check(f *config.File, data *Data) (*Data, map[string]int, error) {
	var all config.Errors
	valid := data
	byEntry := map[string]int{}
	for pass := 0; ; pass++ {
		es := f.CheckPlans(d.source, &valid.Plans)
		if len(es) == 0 {
			break
		}
		if pass == maxPasses {
			return nil, nil, errors.Join(ErrRefused, es)
		}
		if valid == data {
			valid = data.Clone()
		}
		for _, e := range es {
			entry := refuse(&valid.Plans, &data.Plans, e.Path)
			if entry == "" {
				return nil, nil, errors.Join(ErrRefused, es)
			}
			byEntry[entry]++
		}
		all = append(all, es...)
	}
	for h, k := range valid.Keys {
		if k.Tenant == f.Identity.AnonymousTenant {
			if valid == data {
				valid = data.Clone()
			}
			all = append(all, anonymousKey(d.source, h, k))
			byEntry["key:"+h.String()]++
			delete(valid.Keys, h)
		}
	}
	if len(all) == 0 {
		return valid, byEntry, nil
	}
	return valid, byEntry, errors.Join(ErrRefused, all)
}

// anonymousKey is the problem of a key of the anonymous tenant.
func anonymousKey(source string, h apikey.Hash, k apikey.Identity) *config.Error {
	return &config.Error{File: source, Path: "keys." + h.ID(), Msg: fmt.Sprintf("%q is the anonymous tenant (identity.anonymous_tenant): callers without a key would share its limits", k.Tenant)}
}

func refusedSum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// setRefused records n problems for entry (0: none), as a change of it
// found them.
func (d *Directory) setRefused(entry string, n int) {
	delete(d.refused, entry)
	if n > 0 {
		d.refused[entry] = n
	}
	d.nrefused.Store(int64(refusedSum(d.refused)))
}

// refuse removes from pl the entry a problem's path names in orig (pl's
// original, which names are looked up in, so that several problems of one
// entry all find it): a plan's or a tenant's override of one policy, a
// tenant, the default plan. Names may hold dots: the longest name present
// wins. It returns the entry, as check counts it ("tenant:<name>", else
// the path), or "" for a path that names no entry.
func refuse(pl, orig *limits.Plans, path string) string {
	if path == "default_plan" {
		pl.Default = ""
		return path
	}
	if rest, ok := strings.CutPrefix(path, "plans."); ok {
		plan, tail, ok := longest(rest, func(s string) bool { _, ok := orig.Plans[s]; return ok })
		if !ok {
			return ""
		}
		if tail == "" {
			delete(pl.Plans, plan)
			return path
		}
		pol, _, ok := longest(tail, func(s string) bool { _, ok := orig.Plans[plan][s]; return ok })
		if !ok {
			return ""
		}
		if os, ok := pl.Plans[plan]; ok {
			os = maps.Clone(os)
			delete(os, pol)
			pl.Plans[plan] = os
		}
		return path
	}
	if rest, ok := strings.CutPrefix(path, "tenants."); ok {
		tenant, tail, ok := longest(rest, func(s string) bool { _, ok := orig.Tenants[s]; return ok })
		if !ok {
			return ""
		}
		if ovr, ok := strings.CutPrefix(tail, "overrides."); ok {
			pol, _, ok := longest(ovr, func(s string) bool { _, ok := orig.Tenants[tenant].Overrides[s]; return ok })
			if ok {
				if tp, ok := pl.Tenants[tenant]; ok {
					tp.Overrides = maps.Clone(tp.Overrides)
					delete(tp.Overrides, pol)
					pl.Tenants[tenant] = tp
				}
				return "tenant:" + tenant
			}
		}
		delete(pl.Tenants, tenant)
		return "tenant:" + tenant
	}
	return ""
}

// longest splits s at the longest prefix that present accepts, ending at
// the end of s or before a dot; tail is what follows the dot.
func longest(s string, present func(string) bool) (name, tail string, ok bool) {
	if present(s) {
		return s, "", true
	}
	for i := len(s) - 1; i > 0; i-- {
		if s[i] == '.' && present(s[:i]) {
			return s[:i], s[i+1:], true
		}
	}
	return "", "", false
}

// SetTenant replaces one tenant's plan and overrides (tp nil removes it)
// without touching the others or any partition state. An entry the
// policies refuse is not installed; the tenant keeps what it had.
func (d *Directory) SetTenant(tenant string, tp *limits.TenantPlan) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.file == nil {
		return errors.New("directory: SetTenant before Apply")
	}
	set := func(data *Data) {
		if data.Plans.Tenants == nil {
			data.Plans.Tenants = map[string]limits.TenantPlan{}
		}
		if tp == nil {
			delete(data.Plans.Tenants, tenant)
		} else {
			data.Plans.Tenants[tenant] = *tp
		}
	}
	if tp != nil {
		pl := limits.Plans{Default: d.data.Plans.Default, Plans: d.data.Plans.Plans, Tenants: map[string]limits.TenantPlan{tenant: *tp}}
		if es := d.file.CheckPlans(d.source, &pl); len(es) > 0 {
			d.record(false, set)
			d.setRefused("tenant:"+tenant, len(es))
			return errors.Join(ErrRefused, es)
		}
	}
	if err := d.next.SetTenant(tenant, tp); err != nil {
		return err
	}
	d.record(true, set)
	d.setRefused("tenant:"+tenant, 0)
	return nil
}

// record applies a change to the directory as given and, when installed,
// to the directory installed (the same Data until an entry is refused).
func (d *Directory) record(installed bool, change func(*Data)) {
	if !installed && d.given == d.data {
		d.given = d.data.Clone()
	}
	change(d.given)
	if installed && d.given != d.data {
		change(d.data)
	}
}

// SetKey adds or replaces one API key (k nil revokes it). A key the
// policy file refuses is removed, as a load leaves it out: it does not
// stay with the tenant it had.
func (d *Directory) SetKey(h apikey.Hash, k *apikey.Identity) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	set := func(data *Data) {
		if data.Keys == nil {
			data.Keys = map[apikey.Hash]apikey.Identity{}
		}
		if k == nil {
			delete(data.Keys, h)
		} else {
			data.Keys[h] = *k
		}
	}
	if k != nil && d.file != nil && k.Tenant == d.file.Identity.AnonymousTenant {
		if err := d.next.SetKey(h, nil); err != nil {
			return err
		}
		delete(d.data.Keys, h)
		d.record(false, set)
		d.setRefused("key:"+h.String(), 1)
		return errors.Join(ErrRefused, anonymousKey(d.source, h, *k))
	}
	if err := d.next.SetKey(h, k); err != nil {
		return err
	}
	d.setRefused("key:"+h.String(), 0)
	d.record(true, set)
	return nil
}
