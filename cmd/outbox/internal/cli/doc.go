package cli

import (
	"fmt"
	"strings"
)

// OptionsTable renders the options as the Markdown table of docs/configuration.md
// (a test checks that the document carries exactly this table).
func OptionsTable() string {
	var b strings.Builder
	b.WriteString("| key | environment | flag | default | description |\n| --- | --- | --- | --- | --- |\n")
	for _, o := range options {
		def := "—"
		if o.def != "" {
			def = "`" + o.def + "`"
		}
		flag := "`--" + o.flag() + "`"
		if o.scope == scopeRelay {
			flag += " (`relay`)"
		}
		help := o.help
		if o.secret {
			help += " **(secret)**"
		}
		fmt.Fprintf(&b, "| `%s` | `%s` | %s | %s | %s |\n", o.key, o.env(), flag, def, strings.ReplaceAll(help, "|", `\|`))
	}
	return b.String()
}
