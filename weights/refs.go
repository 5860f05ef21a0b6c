package weights

import (
	"errors"
	"strconv"
	"strings"
)

// RefKind is the kind of an object stored upstream, in the provider
// account the request runs under, that a request body names by id.
type RefKind uint8

const (
	// RefFile is a file: the file_id of a Chat Completions file part
	// (file.file_id), of a Responses API input_file or input_image part
	// (in the input, a prompt's variables or a computer screenshot), of
	// a code_interpreter tool's container (file_ids) or an
	// image_generation tool's input_image_mask, or of a Messages API
	// source or container_upload block.
	RefFile RefKind = iota + 1
	// RefItem is an item of a stored response: the id of a Responses API
	// input item of type item_reference, of one with no type (which the
	// API reads as a reference), of a reasoning item without its
	// encrypted_content or of an image_generation_call without its
	// result (the API reads the stored item).
	RefItem
	// RefVectorStore is a vector store: one of a tool's vector_store_ids
	// (the Responses API's file_search).
	RefVectorStore
	// RefAudio is the audio of an earlier Chat Completions response: a
	// message's audio.id.
	RefAudio
	// RefPrompt is a prompt template stored in the account: a Responses
	// API prompt.id.
	RefPrompt
	// RefContainer is a code execution container: a Responses API
	// code_interpreter tool's container given as an id, or a Messages
	// API container (its id, or the string naming it).
	RefContainer
	// RefSkill is a skill uploaded to the account: the skill_id of a
	// Messages API container's skill of a type other than "anthropic"
	// (Anthropic's own skills are not stored in the account).
	RefSkill
)

// String returns the kind's name: "file", "item", "vector_store",
// "audio", "prompt", "container" or "skill".
func (k RefKind) String() string {
	switch k {
	case RefFile:
		return "file"
	case RefItem:
		return "item"
	case RefVectorStore:
		return "vector_store"
	case RefAudio:
		return "audio"
	case RefPrompt:
		return "prompt"
	case RefContainer:
		return "container"
	case RefSkill:
		return "skill"
	}
	return "RefKind(" + strconv.Itoa(int(k)) + ")"
}

// Ref is an object stored upstream that a request body names by id. The
// estimate cannot see its size: it prices the reference as written (a
// file part by the size of its JSON, an item reference as nothing), and
// the provider reads the object for whoever names it. A caller that
// serves several tenants from one provider account checks that each
// [Estimate.Refs] is the requesting tenant's own before the call.
type Ref struct {
	// Kind is what the id names.
	Kind RefKind
	// Field is the JSON path of the member holding the id
	// ("messages.content.file.file_id"): a constant of this package,
	// safe to show to the client.
	Field string
	// ID is the id as the upstream reads it (its escapes decoded),
	// never cut: it may be anything the client sent.
	ID string
}

// MaxRefs is the most objects stored upstream one request body may name
// (see [Estimate.Refs]); a body naming more is refused as malformed.
const MaxRefs = 256

var errTooManyRefs = errors.New("names more than " + strconv.Itoa(MaxRefs) + " objects stored upstream")

// ref records that the body names object v of kind at path: on the
// first walk only, each (kind, id) once, muted or not (a value that is
// only checked is still sent upstream). A null or an empty id names
// nothing.
func (w *walker) ref(kind RefKind, path string, v jstring) {
	if w.t.mode != sizeText || v.raw == "" {
		return
	}
	id := w.decode(v)
	for _, r := range w.refs {
		if r.Kind == kind && r.ID == id {
			return
		}
	}
	if len(w.refs) >= MaxRefs {
		w.fail(path, errTooManyRefs)
		return
	}
	w.refs = append(w.refs, Ref{Kind: kind, Field: path, ID: strings.Clone(id)})
}

// refList reads an array of ids (or null) at path, each a reference of
// kind.
func (w *walker) refList(kind RefKind, path string) {
	if !w.container('[', path, "an array of strings") {
		return
	}
	w.sc.Open()
	for n := 0; w.sc.More(&n, ']'); {
		w.ref(kind, path, w.str(path, ""))
	}
}
