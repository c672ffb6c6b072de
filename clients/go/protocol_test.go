package lockbroker

// protocol_test.go - the client's error codes against the protocol's own
// table (protocol/PROTOCOL.md, "Error codes"), so that a code added to the
// protocol or to the client without the other fails here.

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// protocolDoc is PROTOCOL.md from the directory go test runs in
// (clients/go).
const protocolDoc = "../../protocol/PROTOCOL.md"

var codePattern = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// splitRow splits a Markdown table row into its cells (an escaped "\|"
// stays inside its cell; the outer pipes are optional).
func splitRow(line string) []string {
	line = strings.TrimSpace(line)
	line = strings.TrimPrefix(line, "|")
	if strings.HasSuffix(line, "|") && !strings.HasSuffix(line, `\|`) {
		line = line[:len(line)-1]
	}
	var cells []string
	var cur strings.Builder
	for i := 0; i < len(line); i++ {
		switch {
		case line[i] == '\\' && i+1 < len(line) && line[i+1] == '|':
			cur.WriteByte('|')
			i++
		case line[i] == '|':
			cells = append(cells, strings.TrimSpace(cur.String()))
			cur.Reset()
		default:
			cur.WriteByte(line[i])
		}
	}
	return append(cells, strings.TrimSpace(cur.String()))
}

// cellText is a cell without Markdown emphasis or code marks.
func cellText(cell string) string {
	return strings.TrimSpace(strings.Trim(strings.TrimSpace(cell), "`*_"))
}

var (
	headingLine   = regexp.MustCompile(`^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$`)
	separatorCell = regexp.MustCompile(`^:?-+:?$`)
)

// protocolErrorCodes parses the first table under the heading "Error codes"
// of a Markdown document and returns its "code" column, in order.
func protocolErrorCodes(doc string) ([]string, error) {
	lines := strings.Split(strings.ReplaceAll(doc, "\r\n", "\n"), "\n")
	i, level := 0, 0
	for ; i < len(lines); i++ {
		if m := headingLine.FindStringSubmatch(lines[i]); m != nil && strings.EqualFold(cellText(m[2]), "error codes") {
			level = len(m[1])
			break
		}
	}
	if level == 0 {
		return nil, errors.New(`no heading "Error codes"`)
	}
	// The section's first table: a header row naming a "code" column, a
	// separator row, then its rows.
	for i++; i < len(lines); i++ {
		if m := headingLine.FindStringSubmatch(lines[i]); m != nil && len(m[1]) <= level {
			return nil, errors.New(`no table in the section "Error codes"`)
		}
		if strings.HasPrefix(strings.TrimSpace(lines[i]), "|") {
			break
		}
	}
	if i+1 >= len(lines) {
		return nil, errors.New(`no table in the section "Error codes"`)
	}
	col := -1
	for j, cell := range splitRow(lines[i]) {
		if strings.EqualFold(cellText(cell), "code") {
			col = j
		}
	}
	if col < 0 {
		return nil, errors.New(`the table of "Error codes" has no column "code"`)
	}
	for _, cell := range splitRow(lines[i+1]) {
		if !separatorCell.MatchString(strings.ReplaceAll(cell, " ", "")) {
			return nil, errors.New(`the table of "Error codes" has no separator row`)
		}
	}
	var codes []string
	seen := map[string]bool{}
	for i += 2; i < len(lines) && strings.HasPrefix(strings.TrimSpace(lines[i]), "|"); i++ {
		cells := splitRow(lines[i])
		if col >= len(cells) {
			return nil, errors.New("a row of the table has no code: " + lines[i])
		}
		code := cellText(cells[col])
		if !codePattern.MatchString(code) {
			return nil, errors.New("a row of the table has a code that is not one: " + lines[i])
		}
		if seen[code] {
			return nil, errors.New("a code is listed twice: " + code)
		}
		seen[code] = true
		codes = append(codes, code)
	}
	return codes, nil
}

func TestProtocolErrorCodesParser(t *testing.T) {
	doc := "# P\n\n## Error codes\r\n\nSome prose.\n\n" +
		"| meaning | `Code` |\n|:---|---:|\n" +
		"| a \\| b | `bad_json` |\n| x | not_held |\n\n| other | table |\n|---|---|\n| no | no |\n"
	codes, err := protocolErrorCodes(doc)
	if err != nil || strings.Join(codes, ",") != "bad_json,not_held" {
		t.Errorf("parse = %v, %v", codes, err)
	}
	for what, doc := range map[string]string{
		"no heading":  "# P\n| code |\n|---|\n| x |\n",
		"no table":    "### Error codes\ntext\n### Next\n| code |\n|---|\n| x |\n",
		"no column":   "### Error codes\n| name |\n|---|\n| x |\n",
		"not a code":  "### Error codes\n| code |\n|---|\n| Not A Code |\n",
		"twice":       "### Error codes\n| code |\n|---|\n| x |\n| x |\n",
		"no separate": "### Error codes\n| code |\n| x |\n",
	} {
		if codes, err := protocolErrorCodes(doc); err == nil {
			t.Errorf("%s: parsed %v, want an error", what, codes)
		}
	}
}

// sourceSentinel is one codeError literal of the package's source.
type sourceSentinel struct {
	name string // the package-level variable it initializes, "" if none
	code string
}

// packageSentinels reads the package's non-test sources and returns every
// codeError composite literal, with its code resolved (a string literal, or
// a constant of the package), and the package's string constants.
func packageSentinels(t *testing.T) ([]sourceSentinel, map[string]string) {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var parsed []*ast.File
	consts := map[string]string{}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		parsed = append(parsed, f)
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for k, id := range vs.Names {
					if k < len(vs.Values) {
						if lit, ok := vs.Values[k].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							consts[id.Name], _ = strconv.Unquote(lit.Value)
						}
					}
				}
			}
		}
	}
	resolve := func(e ast.Expr) (string, bool) {
		switch e := e.(type) {
		case *ast.BasicLit:
			s, err := strconv.Unquote(e.Value)
			return s, err == nil && e.Kind == token.STRING
		case *ast.Ident:
			s, ok := consts[e.Name]
			return s, ok
		}
		return "", false
	}
	var out []sourceSentinel
	for _, f := range parsed {
		// The variable each top-level value initializes.
		owner := map[ast.Expr]string{}
		for _, d := range f.Decls {
			if gd, ok := d.(*ast.GenDecl); ok && gd.Tok == token.VAR {
				for _, spec := range gd.Specs {
					vs := spec.(*ast.ValueSpec)
					for k, v := range vs.Values {
						if k < len(vs.Names) {
							if u, ok := v.(*ast.UnaryExpr); ok && u.Op == token.AND {
								v = u.X
							}
							owner[v] = vs.Names[k].Name
						}
					}
				}
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			cl, ok := n.(*ast.CompositeLit)
			if !ok {
				return true
			}
			if id, ok := cl.Type.(*ast.Ident); !ok || id.Name != "codeError" {
				return true
			}
			var codeExpr ast.Expr
			for k, el := range cl.Elts {
				if kv, ok := el.(*ast.KeyValueExpr); ok {
					if key, ok := kv.Key.(*ast.Ident); ok && key.Name == "code" {
						codeExpr = kv.Value
					}
				} else if k == 0 {
					codeExpr = el
				}
			}
			code, ok := resolve(codeExpr)
			if !ok {
				t.Errorf("%s: a codeError whose code is not a string constant", fset.Position(cl.Pos()))
				return true
			}
			out = append(out, sourceSentinel{name: owner[ast.Expr(cl)], code: code})
			return true
		})
	}
	return out, consts
}

// TestErrorCodesMatchProtocol: every error code of PROTOCOL.md's table has
// a sentinel of its own (an exported Err variable, one per code, matched by
// a *ServerError of that code and of no other) and a Code constant, and
// the client has no sentinel or Code constant for a code the table lacks.
// The list the other tests use (allCodes) and the README's are checked
// against the table too.
func TestErrorCodesMatchProtocol(t *testing.T) {
	b, err := os.ReadFile(protocolDoc)
	if err != nil {
		t.Fatalf("the protocol's table of error codes: %v", err)
	}
	docCodes, err := protocolErrorCodes(string(b))
	if err != nil {
		t.Fatalf("%s: %v", protocolDoc, err)
	}
	if len(docCodes) < 10 {
		t.Fatalf("%s: only %d error codes parsed: %v", protocolDoc, len(docCodes), docCodes)
	}
	inDoc := map[string]bool{}
	for _, c := range docCodes {
		inDoc[c] = true
	}

	// Sentinels, from the source: one exported variable per code.
	sentinels, consts := packageSentinels(t)
	byCode := map[string]string{}
	for _, s := range sentinels {
		switch {
		case s.name == "" || !strings.HasPrefix(s.name, "Err"):
			t.Errorf("a codeError for %q that is not an exported Err variable (%q)", s.code, s.name)
		case byCode[s.code] != "":
			t.Errorf("two sentinels for %q: %s and %s", s.code, byCode[s.code], s.name)
		case !inDoc[s.code]:
			t.Errorf("sentinel %s is for %q, which %s does not list", s.name, s.code, protocolDoc)
		}
		byCode[s.code] = s.name
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range docCodes {
		name := byCode[c]
		if name == "" {
			t.Errorf("error code %q of %s has no sentinel", c, protocolDoc)
			continue
		}
		if !strings.Contains(string(readme), "`"+name+"`") {
			t.Errorf("README.md does not list the sentinel %s", name)
		}
	}
	// Code constants: exactly the table's codes, each once.
	constCodes := map[string]string{}
	for name, v := range consts {
		if !strings.HasPrefix(name, "Code") {
			continue
		}
		if !inDoc[v] {
			t.Errorf("constant %s = %q is not a code of %s", name, v, protocolDoc)
		}
		if other := constCodes[v]; other != "" {
			t.Errorf("constants %s and %s are both %q", other, name, v)
		}
		constCodes[v] = name
	}
	for _, c := range docCodes {
		if constCodes[c] == "" {
			t.Errorf("error code %q of %s has no Code constant", c, protocolDoc)
		}
	}

	// At run time: the sentinels' values, through the list the other tests
	// iterate, are the table's codes one for one, and a broker's answer of
	// each code matches its sentinel and no other.
	var listed []string
	for _, ac := range allCodes {
		ce, ok := ac.err.(*codeError)
		if !ok || ce.code != ac.code {
			t.Errorf("allCodes: %q paired with %v", ac.code, ac.err)
			continue
		}
		listed = append(listed, ac.code)
		se := serverError("op", "", &wireError{Code: ac.code})
		for _, other := range allCodes {
			if errors.Is(se, other.err) != (other.code == ac.code) {
				t.Errorf("an answer %q: errors.Is(_, sentinel of %q) = %v", ac.code, other.code, !(other.code == ac.code))
			}
		}
	}
	want := append([]string(nil), docCodes...)
	sort.Strings(want)
	sort.Strings(listed)
	if strings.Join(listed, ",") != strings.Join(want, ",") {
		t.Errorf("allCodes lists %v; %s lists %v", listed, protocolDoc, want)
	}
	t.Logf("%d error codes: %s", len(docCodes), strings.Join(docCodes, " "))
}
