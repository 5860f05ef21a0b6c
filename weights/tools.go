package weights

import "github.com/sluicehq/sluice/internal/jsonscan"

// fnSpans is a function definition: {"name", "description", "parameters"}.
type fnSpans struct {
	name, desc jstring
	params     span
}

// tools prices tool definitions: {"type":"function","function":{...}} in
// the Chat Completions API, {"type":"function","name":...} in the Responses
// API, or a built-in tool priced by size.
func (w *walker) tools() {
	if !w.container('[', "tools", "an array") {
		return
	}
	w.sc.Open()
	for n := 0; w.sc.More(&n, ']'); {
		start, ok := w.pricedObject("tools")
		if !ok {
			continue
		}
		var (
			typ          jstring
			outer, inner fnSpans
			hasInner     bool
			o            object
		)
		w.begin(&o, toolFields, "tools")
		for {
			name, ok := w.next(&o)
			if !ok {
				break
			}
			switch name {
			case "type":
				typ = w.str("tools", name)
			case "function":
				if w.container('{', "tools.function", "an object") {
					hasInner = true
					w.functionDef(&inner, "tools.function")
				}
			case "vector_store_ids":
				w.refList(RefVectorStore, "tools.vector_store_ids")
			case "container":
				w.toolContainer()
			case "input_image_mask":
				// An image_generation tool's mask: an image_url, or a
				// file_id, a reference.
				w.filePart("tools.input_image_mask")
			default:
				w.fnMember(&outer, "tools", name)
			}
		}
		switch {
		case hasInner:
			w.function(&inner)
		case w.decode(typ) == "function" || outer.name.raw != "":
			w.function(&outer)
		default:
			// Built-in tools (web_search, file_search, ...): priced by size.
			w.t.add(bytesTokens(w.sc.Pos() - start))
		}
	}
}

// toolContainer reads a code_interpreter tool's container: the id of a
// container, a reference, or the one the API is to create, whose
// file_ids are references.
func (w *walker) toolContainer() {
	const path = "tools.container"
	switch c := w.sc.Peek(); c {
	case '"', 'n':
		w.ref(RefContainer, path, w.str("tools", "container"))
	case '{':
		var o object
		w.begin(&o, toolContainerFields, path)
		for {
			if _, ok := w.next(&o); !ok {
				return
			}
			w.refList(RefFile, path+".file_ids")
		}
	default:
		w.wrongType(path, "a string or an object", c)
		w.sc.Skip()
	}
}

// functions prices the legacy function definitions.
func (w *walker) functions() {
	if !w.container('[', "functions", "an array") {
		return
	}
	w.sc.Open()
	for n := 0; w.sc.More(&n, ']'); {
		var f fnSpans
		if w.container('{', "functions", "an object") {
			w.functionDef(&f, "functions")
		}
		w.function(&f)
	}
}

// functionDef reads the function definition object at the scanner.
func (w *walker) functionDef(f *fnSpans, path string) {
	var o object
	w.begin(&o, functionDefFields, path)
	for {
		name, ok := w.next(&o)
		if !ok {
			return
		}
		w.fnMember(f, path, name)
	}
}

func (w *walker) fnMember(f *fnSpans, path, name string) {
	switch name {
	case "name":
		f.name = w.str(path, name)
	case "description":
		f.desc = w.str(path, name)
	case "parameters":
		w.sc.SkipSpace()
		f.params.start = w.sc.Pos()
		w.sc.Skip()
		f.params.end = w.sc.Pos()
	}
}

// function prices a function definition with the formula of OpenAI's
// cookbook (num_tokens_for_tools). Nested schema keywords the formula does
// not cover (properties of nested objects, items, etc.) are counted as
// their compact JSON text.
func (w *walker) function(f *fnSpans) {
	if w.t.mute {
		return
	}
	if w.t.mode == sizeText {
		w.t.functions++
	}
	w.buf = appendDecoded(w.buf[:0], f.name)
	w.buf = append(w.buf, ':')
	w.buf = appendNoDot(w.buf, f.desc)
	w.t.text(view(w.buf))
	if f.params.end == f.params.start || w.sc.Src()[f.params.start] != '{' {
		return
	}
	w.at(f.params.start, w.parameters)
}

// appendNoDot appends v without one final dot.
func appendNoDot(dst []byte, v jstring) []byte {
	n := len(dst)
	dst = appendDecoded(dst, v)
	if len(dst) > n && dst[len(dst)-1] == '.' {
		dst = dst[:len(dst)-1]
	}
	return dst
}

// parameters prices the JSON schema of a function's parameters.
func (w *walker) parameters() {
	const path = "tools.parameters"
	var o object
	w.begin(&o, schemaFields, path)
	for {
		name, ok := w.next(&o)
		if !ok {
			return
		}
		switch name {
		case "type":
			w.sc.Skip()
		case "description", "enum":
			if !w.schemaKeyword(name) {
				w.fail("tools", errSchema)
			}
		case "properties":
			switch c := w.sc.Peek(); c {
			case 'n':
				w.sc.Literal()
			case '{':
				var po object
				w.begin(&po, anyFields, path+".properties")
				for {
					key, _, ok := w.member(&po)
					if !ok {
						break
					}
					if po.n == 1 {
						w.t.add(toolPropInit)
					}
					w.t.add(toolPropKey)
					w.property(key)
				}
			default:
				w.fail("tools", errSchema)
				w.sc.Skip()
			}
		}
	}
}

// schemaKeyword reads the value of a description (a string or null) or an
// enum (an array or null) and reports whether it has that type.
func (w *walker) schemaKeyword(name string) bool {
	want := byte('"')
	if name == "enum" {
		want = '['
	}
	c := w.sc.Peek()
	w.sc.Skip()
	return c == want || c == 'n'
}

// property prices one property of a function's parameters: its enum
// values, "name:type:description", then its other keywords as
// "keyword:compact JSON". A property that is not a valid schema object is
// priced as "name:compact JSON".
func (w *walker) property(key jstring) {
	const path = "tools.parameters.properties"
	w.sc.SkipSpace()
	start := w.sc.Pos()
	valid := w.sc.Peek() == '{'
	var typ, enum span
	var desc jstring
	if !valid {
		w.sc.Skip()
	} else {
		var o object
		w.begin(&o, schemaFields, path)
		for {
			name, ok := w.next(&o)
			if !ok {
				break
			}
			w.sc.SkipSpace()
			vs := w.sc.Pos()
			switch c := w.sc.Peek(); {
			case name == "description" && c == '"':
				desc = w.str(path, name)
			case name == "type", c == 'n':
				w.sc.Skip()
			case name == "enum" && c == '[':
				w.sc.Skip()
				enum = span{vs, w.sc.Pos()}
			default: // a description that is not a string, an enum or properties that are not an array or object
				valid = valid && name == "properties" && c == '{'
				w.sc.Skip()
			}
			if name == "type" {
				typ = span{vs, w.sc.Pos()}
			}
		}
	}
	end := w.sc.Pos()
	if !valid {
		w.buf = appendDecoded(w.buf[:0], key)
		w.buf = append(w.buf, ':')
		w.buf = jsonscan.AppendCompact(w.buf, w.sc.Src()[start:end])
		w.t.text(view(w.buf))
		return
	}
	if enum.end > enum.start {
		w.at(enum.start, func() {
			w.sc.Open()
			items := int64(0)
			for n := 0; w.sc.More(&n, ']'); {
				w.sc.SkipSpace()
				vs := w.sc.Pos()
				w.sc.Skip()
				items++
				w.buf = appendScalar(w.buf[:0], w.sc.Src()[vs:w.sc.Pos()])
				w.t.text(view(w.buf))
			}
			if items > 0 {
				w.t.add(toolEnumInit + items*toolEnumItem)
			}
		})
	}
	w.buf = appendDecoded(w.buf[:0], key)
	w.buf = append(w.buf, ':')
	w.buf = appendScalar(w.buf, w.sc.Src()[typ.start:typ.end])
	w.buf = append(w.buf, ':')
	w.buf = appendNoDot(w.buf, desc)
	w.t.text(view(w.buf))
	w.at(start, func() {
		w.sc.Open()
		for n := 0; w.sc.More(&n, '}'); {
			raw, dirty := w.sc.Key()
			w.sc.SkipSpace()
			vs := w.sc.Pos()
			w.sc.Skip()
			k := jstring{raw, dirty}
			switch w.decode(k) {
			case "type", "description", "enum":
				continue
			}
			w.buf = appendDecoded(w.buf[:0], k)
			w.buf = append(w.buf, ':')
			w.buf = jsonscan.AppendCompact(w.buf, w.sc.Src()[vs:w.sc.Pos()])
			w.t.text(view(w.buf))
		}
	})
}

// appendScalar appends a JSON string's value, or any other value's compact
// JSON text.
func appendScalar(dst []byte, v string) []byte {
	if len(v) > 0 && v[0] == '"' {
		dst, _ = jsonscan.AppendUnquote(dst, v[1:len(v)-1])
		return dst
	}
	return jsonscan.AppendCompact(dst, v)
}

// responseFormat prices the JSON schema of a structured output format: the
// member key (json_schema in Chat Completions' response_format, schema in
// the Responses API's text.format), as compact JSON.
func (w *walker) responseFormat(path, key string) {
	if !w.container('{', path, "an object") {
		return
	}
	var o object
	w.begin(&o, responseFormatFields, path)
	for {
		name, ok := w.next(&o)
		if !ok {
			return
		}
		switch name {
		case "type":
			w.str(path, name)
		case key:
			v := w.sc.Value()
			w.buf = jsonscan.AppendCompact(w.buf[:0], v)
			w.t.text(view(w.buf))
		default:
			w.sc.Skip()
		}
	}
}
