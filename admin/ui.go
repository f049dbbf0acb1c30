package admin

import (
	"embed"
	"net/http"
	"strconv"
)

// The approvals page: a static HTML page, one script and one style sheet,
// embedded in the binary. They hold no data; the script asks the reviewer for
// the admin token and calls the admin API under /v1/ with it, so serving them
// needs no token.
//
//go:embed ui/approvals.html ui/approvals.js ui/approvals.css
var uiFiles embed.FS

// uiContentSecurityPolicy allows the page only its own script and style
// sheet: no inline script or style, no plugins, no <base>, no framing. The
// page shows untrusted model output (tool names, arguments), and this policy
// is the second line of defence should any of it ever reach the DOM as markup.
const uiContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; " +
	"object-src 'none'; base-uri 'none'; frame-ancestors 'none'"

// uiAsset is one embedded file of the page and the path it is served at.
type uiAsset struct {
	file        string // in uiFiles
	contentType string
}

// uiAssets maps each path under /ui/ to its file. The page links its assets
// relatively (approvals.js next to approvals), so the listener can sit behind
// a proxy that adds a path prefix.
var uiAssets = map[string]uiAsset{
	"/ui/approvals":     {"ui/approvals.html", "text/html; charset=utf-8"},
	"/ui/approvals.js":  {"ui/approvals.js", "text/javascript; charset=utf-8"},
	"/ui/approvals.css": {"ui/approvals.css", "text/css; charset=utf-8"},
}

// uiHandler serves the approvals page and its assets (GET and HEAD on the
// paths of uiAssets), each with the page's security headers, which a 404
// under /ui/ carries too.
func uiHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", uiContentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		asset, ok := uiAssets[r.URL.Path]
		if !ok {
			http.Error(w, "no such page: "+r.URL.Path, http.StatusNotFound)
			return
		}
		body, err := uiFiles.ReadFile(asset.file)
		if err != nil { // cannot happen: the files are embedded at build time
			http.Error(w, "reading the embedded "+asset.file+": "+err.Error(), http.StatusInternalServerError)
			return
		}
		h.Set("Content-Type", asset.contentType)
		h.Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(http.StatusOK)
		if r.Method != http.MethodHead {
			w.Write(body)
		}
	})
}
