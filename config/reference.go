package config

import (
	"fmt"
	"strings"
)

// reference renders the settings table as Markdown, as the README shows it.
func reference() string {
	var b strings.Builder
	b.WriteString("| flag | environment | default | meaning |\n|---|---|---|---|\n")
	for _, f := range Flags {
		def := "(none)"
		if f.Default != "" {
			def = "`" + f.Default + "`"
		}
		name := "`--" + f.Name + "`"
		if f.Repeatable() {
			name += " (repeatable)"
		}
		fmt.Fprintf(&b, "| %s | `%s` | %s | %s |\n", name, f.Env(), def, strings.ReplaceAll(f.Usage, "|", `\|`))
	}
	fmt.Fprintf(&b, "| `--config` | `AGUARD_CONFIG` | (none) | YAML file with settings (keys spelled like the flags) and `routes` |\n")
	return b.String()
}
