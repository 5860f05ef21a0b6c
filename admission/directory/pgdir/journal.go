package pgdir

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"

	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/directory"
	"github.com/sluicehq/sluice/admission/limits"
)

// The snapshot is two files: the whole directory, rewritten at full loads
// (writeSnapshot), and its journal next to it (Config.Snapshot plus
// ".changes"), to which each batch of changes is appended and flushed to
// disk before the running directory applies it. A change is thus durable
// at the cost of a few hundred bytes, whatever the directory's size. The
// journal's first line names the snapshot it follows (its written time):
// a journal left behind by a crash between the two files' writes follows
// another snapshot and is not read.

// journalPath is the journal of the snapshot at path.
func journalPath(path string) string { return path + ".changes" }

// maxJournal is the most changes the journal holds: past it, the
// snapshot is rewritten whole and the journal started afresh.
const maxJournal = 10_000

// A record is one line of the journal: its header (Base), a tenant
// (Plan nil: gone), a key (Key) or a key gone (Gone). At is when the
// directory was known current with the database: a full load for the
// header, the re-read of the entry for a change.
type record struct {
	At     time.Time          `json:"at,omitzero"`
	Base   string             `json:"base,omitempty"`
	Tenant string             `json:"tenant,omitempty"`
	Plan   *limits.TenantPlan `json:"plan,omitempty"`
	Key    *snapshotKey       `json:"key,omitempty"`
	Gone   string             `json:"gone_key,omitempty"`
}

// recordOf returns the journal record of c.
func recordOf(c *change) record {
	switch {
	case c.hash != nil && c.key == nil:
		return record{Gone: c.hash.String()}
	case c.hash != nil:
		return record{Key: &snapshotKey{Hash: c.hash.String(), KeyID: c.key.KeyID, Tenant: c.key.Tenant, User: c.key.User}}
	}
	return record{Tenant: c.tenant, Plan: c.tp}
}

// replay applies to s the journal at path, if there is one and it follows
// s. A last line without its newline is a write a crash cut short (the
// change was not acted on) and is left out; any other line that does not
// read is an error.
func replay(path string, s *snapshot) error {
	fh, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer fh.Close()
	body, err := io.ReadAll(&limitedReader{r: fh, n: maxSnapshot})
	if err != nil {
		return fmt.Errorf("journal %s: %w", path, err)
	}
	lines := bytes.Split(body, []byte("\n"))
	lines = lines[:len(lines)-1] // the last is empty, or cut short
	for i, line := range lines {
		var r record
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&r); err != nil {
			return fmt.Errorf("journal %s: line %d: %w", path, i+1, err)
		}
		if i == 0 && r.Base != s.Written.Format(time.RFC3339Nano) {
			return nil // it follows another snapshot
		}
		if i > 0 {
			if err := r.to(s.Data); err != nil {
				return fmt.Errorf("journal %s: line %d: %w", path, i+1, err)
			}
		}
		if r.At.After(s.Current) {
			s.Current = r.At
		}
	}
	return nil
}

// to applies r to d.
func (r *record) to(d *directory.Data) error {
	switch {
	case r.Key != nil:
		return r.Key.to(d)
	case r.Gone != "":
		h, err := apikey.ParseHash(r.Gone)
		if err != nil {
			return err
		}
		delete(d.Keys, h)
	case r.Tenant != "" && r.Plan == nil:
		delete(d.Plans.Tenants, r.Tenant)
	case r.Tenant != "":
		d.Plans.Tenants[r.Tenant] = *r.Plan
	default:
		return errors.New("not a change")
	}
	return nil
}

// snapshot writes d as the snapshot, if one is configured, and starts its
// journal afresh. When it cannot, it removes both files (see
// dropSnapshot).
func (f *Follower) snapshot(d *directory.Data) {
	if f.cfg.Snapshot == "" {
		return
	}
	written, err := writeSnapshot(f.cfg.Snapshot, d, &f.written)
	if err == nil && !written.IsZero() {
		f.base = written
	}
	if err == nil {
		err = f.startJournal()
	}
	if err != nil {
		f.dropSnapshot(err)
	}
}

// startJournal replaces the journal with an empty one following the
// snapshot written at f.base, and opens it for appending.
func (f *Follower) startJournal() error {
	f.closeJournal()
	path := journalPath(f.cfg.Snapshot)
	head, err := json.Marshal(record{At: time.Now().UTC(), Base: f.base.Format(time.RFC3339Nano)})
	if err != nil {
		return err
	}
	if err := replaceFile(path, func(w io.Writer) error { _, err := w.Write(append(head, '\n')); return err }); err != nil {
		return err
	}
	f.journal, err = os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	f.journaled = 0
	return err
}

// record appends changes to the journal and flushes it to disk, before
// they are applied: a replica started from the snapshot after a crash
// never takes back a change this one acted on. A journal grown past
// maxJournal is folded into a new snapshot instead.
func (f *Follower) record(changes []change) {
	if f.journal == nil || len(changes) == 0 {
		return // no snapshot configured, or none to follow
	}
	if f.journaled+len(changes) > maxJournal {
		next := f.dir.Data()
		for i := range changes {
			changes[i].to(next)
		}
		f.written = [sha256.Size]byte{}
		f.snapshot(next)
		return
	}
	var buf []byte
	for i := range changes {
		r := recordOf(&changes[i])
		r.At = changes[i].at
		line, err := json.Marshal(r)
		if err != nil {
			f.dropSnapshot(err)
			return
		}
		buf = append(append(buf, line...), '\n')
	}
	_, err := f.journal.Write(buf)
	if err == nil {
		err = f.journal.Sync()
	}
	if err != nil {
		f.dropSnapshot(err)
		return
	}
	f.journaled += len(changes)
}

// dropSnapshot removes the snapshot and its journal after a write failed:
// left behind, they may hold a key revoked since, which a replica started
// from them would accept. The next full load writes them again.
func (f *Follower) dropSnapshot(err error) {
	f.closeJournal()
	f.written = [sha256.Size]byte{}
	for _, p := range []string{f.cfg.Snapshot, journalPath(f.cfg.Snapshot)} {
		if rerr := os.Remove(p); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			err = errors.Join(err, rerr)
		}
	}
	f.log.Error("directory snapshot not written: it is removed until the next full load (a start without the database fails meanwhile)", "snapshot", f.cfg.Snapshot, "error", err)
}

func (f *Follower) closeJournal() {
	if f.journal != nil {
		_ = f.journal.Close()
		f.journal = nil
	}
}
