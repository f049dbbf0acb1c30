package policy

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/bundle"
	"github.com/open-policy-agent/opa/v1/util"
	"go.yaml.in/yaml/v3"

	"github.com/aguard/aguard/policies"
)

// decisionRef is the rule every policy set must define.
var decisionRef = ast.MustParseRef("data.aguard.decision")

// source is where a policy set is read from: a folder on disk, a bundle
// file, or the embedded default set.
type source struct {
	fsys fs.FS
	// name turns a slash path inside fsys into the name reported in errors
	// and policy locations: the path on disk, or "embedded:" + the path.
	name func(rel string) string
	// bundle is the file name inside fsys of a bundle file (.tar.gz), ""
	// for a folder.
	bundle string
}

// isBundleFile reports whether path names a bundle file rather than a folder:
// a .tar.gz or .tgz file, as `opa build` writes them.
func isBundleFile(path string) bool {
	return strings.HasSuffix(path, ".tar.gz") || strings.HasSuffix(path, ".tgz")
}

func newSource(dir string) source {
	if dir == "" {
		return source{fsys: policies.FS(), name: func(rel string) string {
			if rel == "." {
				return "the embedded policy set"
			}
			return "embedded:" + rel
		}}
	}
	if isBundleFile(dir) {
		parent, file := filepath.Split(dir)
		if parent == "" {
			parent = "."
		}
		return source{fsys: os.DirFS(parent), bundle: file, name: func(rel string) string {
			if rel == "." || rel == file {
				return dir
			}
			return dir + ":" + rel
		}}
	}
	return source{fsys: os.DirFS(dir), name: func(rel string) string { return filepath.Join(dir, filepath.FromSlash(rel)) }}
}

// policyFile is one file of a snapshot.
type policyFile struct {
	rel  string // slash path inside the source
	name string // as reported in errors
	data []byte
}

// snapshot is the content of a policy folder read at one moment. The engine
// compiles exactly the bytes it hashed, so a revision always names what is
// serving.
type snapshot struct {
	root   string // the folder or bundle file, as reported in errors
	files  []policyFile
	sum    [sha256.Size]byte
	bundle bool // files holds one bundle file
}

// revision is the short form of the content hash that names a policy set.
func (s *snapshot) revision() string {
	return hex.EncodeToString(s.sum[:6])
}

// readSnapshot reads the .rego, .json, .yaml and .yml files of src,
// recursively, in lexical order. Names starting with "." are skipped (editor
// files, .git, and the ..data links of a Kubernetes ConfigMap mount, whose
// files are also visible at the top level). A symbolic link to a file is read;
// one to a folder is not followed. *_test.rego files are read only when
// withTests is set: they never change the policy that decides.
func readSnapshot(src source, withTests bool) (*snapshot, error) {
	snap := &snapshot{root: src.name(".")}
	if src.bundle != "" {
		data, err := fs.ReadFile(src.fsys, src.bundle)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("policy bundle %s does not exist", snap.root)
		}
		if err != nil {
			return nil, fmt.Errorf("read policy bundle: %w", err)
		}
		snap.bundle = true
		snap.files = []policyFile{{rel: src.bundle, name: snap.root, data: data}}
		snap.sum = sha256.Sum256(data)
		return snap, nil
	}
	// The folder itself is checked first: fs.WalkDir would report a missing
	// one by its path inside itself, ".".
	info, err := fs.Stat(src.fsys, ".")
	var pathErr *fs.PathError
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("policy folder %s does not exist", snap.root)
	case errors.Is(err, syscall.ENOTDIR) || err == nil && !info.IsDir():
		return nil, fmt.Errorf("policy folder %s is not a folder (a bundle file's name ends in .tar.gz or .tgz)", snap.root)
	case errors.As(err, &pathErr):
		return nil, fmt.Errorf("read policy folder %s: %w", snap.root, pathErr.Err)
	case err != nil:
		return nil, fmt.Errorf("read policy folder %s: %w", snap.root, err)
	}
	h := sha256.New()
	err = fs.WalkDir(src.fsys, ".", func(rel string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if rel != "." && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() || !isPolicyFile(rel, withTests) {
			return nil
		}
		if d.Type()&fs.ModeSymlink != 0 {
			info, err := fs.Stat(src.fsys, rel)
			if err != nil {
				return err
			}
			if !info.Mode().IsRegular() {
				return nil
			}
		} else if !d.Type().IsRegular() {
			return nil
		}
		data, err := fs.ReadFile(src.fsys, rel)
		if err != nil {
			return err
		}
		snap.files = append(snap.files, policyFile{rel: rel, name: src.name(rel), data: data})
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(rel)))
		h.Write(n[:])
		h.Write([]byte(rel))
		binary.BigEndian.PutUint64(n[:], uint64(len(data)))
		h.Write(n[:])
		h.Write(data)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read policy folder %s: %w", snap.root, err)
	}
	h.Sum(snap.sum[:0])
	return snap, nil
}

func isPolicyFile(rel string, withTests bool) bool {
	switch path.Ext(rel) {
	case ".rego":
		return withTests || !strings.HasSuffix(rel, "_test.rego")
	case ".json", ".yaml", ".yml":
		return true
	}
	return false
}

// parsed is a snapshot turned into Rego modules and a data document.
type parsed struct {
	modules map[string]*ast.Module
	data    map[string]any
	// revision is the bundle's manifest revision, "" for a folder or a
	// bundle without one.
	revision string
}

// parse parses every Rego file of snap (Rego v1 syntax) and merges every
// data file into one document, at the path of its folder: a.json at the top
// is data, x/y/a.yaml is data.x.y, as `opa eval -d DIR` does. Errors name the
// file and, for Rego, the line; all broken files are reported at once.
func parse(snap *snapshot) (*parsed, error) {
	if snap.bundle {
		return parseBundle(snap)
	}
	p := &parsed{modules: map[string]*ast.Module{}, data: map[string]any{}}
	var errs []error
	opts := ast.ParserOptions{RegoVersion: ast.RegoV1, ProcessAnnotation: true}
	for _, f := range snap.files {
		switch path.Ext(f.rel) {
		case ".rego":
			m, err := ast.ParseModuleWithOpts(f.name, string(f.data), opts)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			p.modules[f.name] = m
		default:
			if err := mergeDataFile(p.data, f); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if len(p.modules) == 0 {
		return nil, fmt.Errorf("no .rego files in %s", snap.root)
	}
	return p, nil
}

// parseBundle reads a bundle file as OPA does (`opa run -b`): every module
// in it, test modules included, and its data at the paths the bundle gives
// them. Signatures are not verified: a bundle file given on the command line
// is the operator's own; bundles downloaded through an OPA configuration are
// verified by OPA with the configured keys.
func parseBundle(snap *snapshot) (*parsed, error) {
	b, err := bundle.NewReader(bytes.NewReader(snap.files[0].data)).
		WithBaseDir(snap.root).
		WithProcessAnnotations(true).
		WithRegoVersion(ast.RegoV1).
		WithSkipBundleVerification(true).
		Read()
	if err != nil {
		return nil, fmt.Errorf("read bundle: %w", err)
	}
	p := &parsed{modules: make(map[string]*ast.Module, len(b.Modules)), data: b.Data, revision: b.Manifest.Revision}
	for _, m := range b.Modules {
		p.modules[m.Path] = m.Parsed
	}
	if p.data == nil {
		p.data = map[string]any{}
	}
	if len(p.modules) == 0 {
		return nil, fmt.Errorf("no .rego files in bundle %s", snap.root)
	}
	return p, nil
}

func mergeDataFile(root map[string]any, f policyFile) error {
	var doc any
	if path.Ext(f.rel) == ".json" {
		if err := util.UnmarshalJSON(f.data, &doc); err != nil {
			return fmt.Errorf("%s: invalid JSON: %w", f.name, err)
		}
	} else {
		var y any
		if err := yaml.Unmarshal(f.data, &y); err != nil {
			return fmt.Errorf("%s: invalid YAML: %w", f.name, err)
		}
		// Through JSON, so that the data has the types OPA expects
		// (json.Number, map[string]any) and non-string keys are refused.
		js, err := json.Marshal(y)
		if err != nil {
			return fmt.Errorf("%s: YAML that is not JSON data: %w", f.name, err)
		}
		if err := util.UnmarshalJSON(js, &doc); err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
	}
	if doc == nil {
		return nil // an empty YAML file
	}
	obj, ok := doc.(map[string]any)
	if !ok {
		return fmt.Errorf("%s: a data file must hold an object, found %T", f.name, doc)
	}
	at := root
	if dir := path.Dir(f.rel); dir != "." {
		for _, seg := range strings.Split(dir, "/") {
			next, ok := at[seg].(map[string]any)
			if !ok {
				if _, taken := at[seg]; taken {
					return fmt.Errorf("%s: data path %s is already a value", f.name, dir)
				}
				next = map[string]any{}
				at[seg] = next
			}
			at = next
		}
	}
	return mergeObject(at, obj, f.name, "")
}

// mergeObject merges src into dst; two files may add keys to the same object
// but not set the same leaf.
func mergeObject(dst, src map[string]any, file, at string) error {
	for k, v := range src {
		old, exists := dst[k]
		if !exists {
			dst[k] = v
			continue
		}
		oldObj, ok1 := old.(map[string]any)
		newObj, ok2 := v.(map[string]any)
		if !ok1 || !ok2 {
			return fmt.Errorf("%s: data key %s%s is also set by another data file", file, at, k)
		}
		if err := mergeObject(oldObj, newObj, file, at+k+"."); err != nil {
			return err
		}
	}
	return nil
}

// compile compiles the modules of p with the built-in functions caps allow
// and checks that they define data.aguard.decision. Compiler errors name
// file:line; a call to a built-in function caps leave out names it.
func compile(p *parsed, caps *ast.Capabilities) (*ast.Compiler, error) {
	c := ast.NewCompiler().
		WithDefaultRegoVersion(ast.RegoV1).
		WithEnablePrintStatements(true).
		WithCapabilities(caps)
	c.Compile(p.modules)
	if c.Failed() {
		return nil, explainCapabilityErrors(c.Errors, caps)
	}
	if len(c.GetRulesExact(decisionRef)) == 0 {
		return nil, fmt.Errorf("no rule defines %v (a rule named decision in package aguard)", decisionRef)
	}
	return c, nil
}
