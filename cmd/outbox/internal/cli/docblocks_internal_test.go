package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/outboxkit/outbox/internal/pgtest"
)

// The documents whose commands and SQL are checked: the README and docs/*.md.
const repoRoot = "../../../.."

// notRunMarker, a comment line in a ```sql block, exempts the block from being run, with
// the reason after the colon (required): `-- not run by the doc test: VACUUM cannot run
// in a transaction`.
var notRunMarker = regexp.MustCompile(`(?m)^\s*--\s*not run by the doc test:\s*(\S.*)?$`)

// docFiles returns README.md and docs/*.md.
func docFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{filepath.Join(repoRoot, "README.md")}, files...)
}

// block is a fenced code block: its language, its first line's number and its lines.
type block struct {
	lang  string
	line  int
	lines []string
}

// docText is a document split into its fenced blocks and the prose lines outside them
// (numbered from 1).
type docText struct {
	name   string
	blocks []block
	prose  []proseLine
}

// proseLine is a line outside the fenced blocks, with its number.
type proseLine struct {
	n    int
	text string
}

func parseDoc(name, text string) docText {
	d := docText{name: name}
	var cur *block
	for i, line := range strings.Split(text, "\n") {
		n := i + 1
		trimmed := strings.TrimSpace(line)
		switch {
		case cur == nil && strings.HasPrefix(trimmed, "```"):
			cur = &block{lang: strings.TrimSpace(strings.TrimPrefix(trimmed, "```")), line: n + 1}
		case cur != nil && trimmed == "```":
			d.blocks = append(d.blocks, *cur)
			cur = nil
		case cur != nil:
			cur.lines = append(cur.lines, line)
		default:
			d.prose = append(d.prose, proseLine{n, line})
		}
	}
	return d
}

// shellLangs are the fenced blocks whose lines are shell commands.
var shellLangs = map[string]bool{"sh": true, "bash": true, "shell": true, "console": true}

// commandLine is one `outbox …` invocation found in a document.
type commandLine struct {
	where string   // file:line
	args  []string // after "outbox"
}

// shellCommands returns the outbox invocations of the shell blocks of d: continuation
// lines joined, comments dropped, a console block's "$ " prompts taken (its other lines
// are output), pipelines and lists (&&, ||, ;, |) split, leading VAR=value words skipped.
func shellCommands(d docText) ([]commandLine, error) {
	var out []commandLine
	for _, b := range d.blocks {
		if !shellLangs[b.lang] {
			continue
		}
		for i := 0; i < len(b.lines); i++ {
			start := b.line + i
			line := b.lines[i]
			if b.lang == "console" {
				rest, ok := strings.CutPrefix(strings.TrimSpace(line), "$ ")
				if !ok {
					continue
				}
				line = rest
			}
			for strings.HasSuffix(line, `\`) && i+1 < len(b.lines) {
				i++
				line = strings.TrimSuffix(line, `\`) + " " + b.lines[i]
			}
			words, err := shellWords(line)
			if err != nil {
				return nil, fmt.Errorf("%s:%d: %w", d.name, start, err)
			}
			for _, seg := range words {
				seg = withoutRedirections(seg)
				for len(seg) > 0 && isAssignment(seg[0]) {
					seg = seg[1:]
				}
				if len(seg) > 0 && seg[0] == "outbox" {
					out = append(out, commandLine{where: fmt.Sprintf("%s:%d", d.name, start), args: seg[1:]})
				}
			}
		}
	}
	return out, nil
}

// redirection is a word that redirects (> file, 2>&1, <in): not the command's argument.
var redirection = regexp.MustCompile(`^[0-9]*(>>?|<)(&[0-9-])?`)

// withoutRedirections drops the redirections from a simple command's words: the
// operator and, when it stands alone, the file word after it.
func withoutRedirections(words []string) []string {
	var out []string
	for i := 0; i < len(words); i++ {
		w := words[i]
		if m := redirection.FindString(w); m != "" {
			if m == w && !strings.Contains(w, "&") {
				i++ // the target is the next word
			}
			continue
		}
		out = append(out, w)
	}
	return out
}

var assignment = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)

func isAssignment(w string) bool { return assignment.MatchString(w) }

// shellWords splits a command line as a POSIX shell does, enough for documentation:
// quotes, backslashes, comments, and the operators ; & | && || as separators. It
// returns the words of each simple command.
func shellWords(line string) ([][]string, error) {
	var (
		cmds  [][]string
		words []string
		word  strings.Builder
		inW   bool
	)
	flush := func() {
		if inW {
			words = append(words, word.String())
			word.Reset()
			inW = false
		}
	}
	endCmd := func() {
		flush()
		if len(words) > 0 {
			cmds = append(cmds, words)
		}
		words = nil
	}
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '\'':
			j := strings.IndexByte(line[i+1:], '\'')
			if j < 0 {
				return nil, fmt.Errorf("unterminated ' in %q", line)
			}
			word.WriteString(line[i+1 : i+1+j])
			inW = true
			i += j + 1
		case c == '"':
			i++
			for ; i < len(line) && line[i] != '"'; i++ {
				if line[i] == '\\' && i+1 < len(line) {
					i++
				}
				word.WriteByte(line[i])
			}
			if i >= len(line) {
				return nil, fmt.Errorf("unterminated \" in %q", line)
			}
			inW = true
		case c == '\\' && i+1 < len(line):
			i++
			word.WriteByte(line[i])
			inW = true
		case c == '#' && !inW:
			endCmd()
			return cmds, nil
		case c == ' ' || c == '\t':
			flush()
		case c == ';' || c == '&' || c == '|':
			endCmd()
		default:
			word.WriteByte(c)
			inW = true
		}
	}
	endCmd()
	return cmds, nil
}

// runsUntilTheDatabase are the commands that check their own flags (a required
// --reason, a UUID, a duration) before they open the database, or need none: the doc
// test runs them for real, without a database URL, and their refusal to connect is the
// success. The others (the relay, which builds its sink first) run nothing.
var runsUntilTheDatabase = map[string]bool{
	"outbox status": true, "outbox dead list": true, "outbox dead show": true, "outbox replay": true,
	"outbox discard": true, "outbox purge": true, "outbox tail": true, "outbox migrate": true,
	"outbox migrate up": true, "outbox migrate status": true, "outbox migrate sql": true, "outbox config": true,
}

// checkCommand runs args on a fresh outbox command tree that never connects:
// subcommands, flags (unknown ones fail), positional arguments (each command's Args),
// the configuration's values (parsed as configure parses them; a --config file is not
// read), and the flag checks of the commands in runsUntilTheDatabase.
func checkCommand(args []string) error {
	a := &app{io: IO{In: strings.NewReader(""), Out: io.Discard, Err: io.Discard}, scrub: &scrubber{}}
	a.out, a.errOut = io.Discard, io.Discard
	root := a.rootCommand()
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		a.cfgFile = ""
		if err := a.configure(cmd.Flags()); err != nil {
			return err
		}
		a.cfg.DatabaseURL = "" // never connect
		return nil
	}
	var neuter func(c *cobra.Command)
	neuter = func(c *cobra.Command) {
		if !runsUntilTheDatabase[c.CommandPath()] {
			// Runs nothing; a group (dead) becomes runnable too, so its arguments are
			// checked (cobra shows a group's help whatever follows it).
			c.Run, c.RunE = nil, func(*cobra.Command, []string) error { return nil }
		}
		if c.HasSubCommands() && c.Args == nil {
			c.Args = cobra.NoArgs // a word that is no subcommand: "unknown command"
		}
		for _, sub := range c.Commands() {
			neuter(sub)
		}
	}
	neuter(root)
	root.SetArgs(args)
	root.SetOut(io.Discard)
	root.SetErr(io.Discard)
	err := root.Execute()
	if err != nil && strings.Contains(err.Error(), "database.url is not set") {
		return nil // every check before the database passed
	}
	return err
}

// inlineCommand finds `outbox …` in a prose line's code spans (after VAR=value words):
// the synopses of tables and sentences, with placeholders (ID…, [--yes], a|b).
var inlineSpan = regexp.MustCompile("`([^`]+)`")

// inlineFlag is a flag named in a synopsis: --name, also after [ ( or |.
var inlineFlag = regexp.MustCompile(`(?:^|[\s\[(|])--([a-z][a-z0-9-]*)`)

// checkSynopsis checks a command named in prose: its subcommand words resolve in the
// tree (a word the command does not take as an argument is an unknown subcommand), and
// every --flag it names is a flag of that command.
func checkSynopsis(text string) error {
	a := &app{scrub: &scrubber{}}
	cmd := a.rootCommand()
	fields := strings.Fields(text)
	for len(fields) > 0 && isAssignment(fields[0]) {
		fields = fields[1:]
	}
	fields = fields[1:] // "outbox"
	for len(fields) > 0 && regexp.MustCompile(`^[a-z][a-z-]*$`).MatchString(fields[0]) {
		sub, _, err := cmd.Find([]string{fields[0]})
		if err != nil {
			return fmt.Errorf("unknown subcommand %q of %q", fields[0], cmd.CommandPath())
		}
		if sub == cmd {
			if cmd.HasSubCommands() && cmd.ValidateArgs([]string{fields[0]}) != nil {
				return fmt.Errorf("unknown subcommand %q of %q", fields[0], cmd.CommandPath())
			}
			break
		}
		cmd = sub
		fields = fields[1:]
	}
	for _, m := range inlineFlag.FindAllStringSubmatch(strings.Join(fields, " "), -1) {
		if cmd.Flag(m[1]) == nil {
			return fmt.Errorf("%q has no flag --%s", cmd.CommandPath(), m[1])
		}
	}
	return nil
}

// synopses returns the `outbox …` code spans of d's prose, split at && || ; and |.
func synopses(d docText) []commandLine {
	var out []commandLine
	for _, pl := range d.prose {
		n := pl.n
		for _, m := range inlineSpan.FindAllStringSubmatch(pl.text, -1) {
			for _, part := range regexp.MustCompile(`&&|\|\||;|\s\|\s`).Split(m[1], -1) {
				fields := strings.Fields(part)
				for len(fields) > 0 && isAssignment(fields[0]) {
					fields = fields[1:]
				}
				if len(fields) > 0 && fields[0] == "outbox" {
					out = append(out, commandLine{where: fmt.Sprintf("%s:%d", d.name, n), args: fields})
				}
			}
		}
	}
	return out
}

// docProblems returns what is wrong with the commands of one document: a full parse of
// every command of its shell blocks, and the synopses of its prose.
func docProblems(d docText) []string {
	var problems []string
	cmds, err := shellCommands(d)
	if err != nil {
		problems = append(problems, err.Error())
	}
	for _, c := range cmds {
		if err := checkCommand(c.args); err != nil {
			problems = append(problems, fmt.Sprintf("%s: outbox %s: %v", c.where, strings.Join(c.args, " "), err))
		}
	}
	for _, s := range synopses(d) {
		if err := checkSynopsis(strings.Join(s.args, " ")); err != nil {
			problems = append(problems, fmt.Sprintf("%s: `%s`: %v", s.where, strings.Join(s.args, " "), err))
		}
	}
	return problems
}

// TestDocCommandsParse: every `outbox …` command in a shell block of README.md and
// docs/*.md parses against the real command tree (subcommands, flags, arguments, the
// configuration's values), and every `outbox …` synopsis in their prose names existing
// subcommands and flags. A failure names the file and line.
func TestDocCommandsParse(t *testing.T) {
	t.Parallel()
	total := 0
	for _, f := range docFiles(t) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		d := parseDoc(strings.TrimPrefix(f, repoRoot+"/"), string(b))
		cmds, _ := shellCommands(d)
		total += len(cmds) + len(synopses(d))
		for _, p := range docProblems(d) {
			t.Error(p)
		}
	}
	t.Logf("%d outbox commands and synopses checked", total)
	if total < 20 {
		t.Errorf("only %d outbox commands found in the docs: the scanner is broken", total)
	}
}

// TestDocCommandsCheckCatchesDrift: the check fails on an unknown flag, an unknown
// subcommand, a bad value and a wrong argument count, in a block and in prose, naming
// the file and line; and passes the same commands spelled right.
func TestDocCommandsCheckCatchesDrift(t *testing.T) {
	t.Parallel()
	doc := strings.Join([]string{
		"# Drifted", // 1
		"```sh",     // 2
		"OUTBOX_DATABASE_URL=postgres://db/app outbox status --jsn", // 3: unknown flag
		"outbox dead lst",           // 4: unknown subcommand
		"outbox relay \\",           // 5: a bad value, continued
		"  --relay-batch-size lots", // 6
		"outbox dead show",          // 7: missing ID
		"outbox migrate && outbox purge --older-than 24h # retention", // 8: fine
		"outbox migrate sql --schema billing > 0001.sql 2>&1",         // 9: fine
		"outbox replay --id 0190d6d2-0000-7000-8000-000000000000",     // 10: no --reason
		"outbox purge --older-than 24 && outbox dead show o-1",        // 11: not a duration, not a UUID
		"```",        // 12
		"```console", // 13
		"$ outbox tail --from-seq 0 --count 3 | jq .", // 14: fine
		`{"id": "…"}`, // 15: output
		"$ outbox replay --id 0190d6d2-0000-7000-8000-000000000000 --reason 'INC-1' --yes --actr me", // 16: unknown flag
		"```", // 17
		"Then `outbox dead list --limit 5` and `outbox replay --id ID… [--since 24h] [--yess]`.", // 18: --yess
		"And `outbox statsu`.", // 19
	}, "\n")
	got := docProblems(parseDoc("drift.md", doc))
	want := []string{
		"drift.md:3: outbox status --jsn: unknown flag: --jsn",
		`drift.md:4: outbox dead lst: unknown command "lst" for "outbox dead"`,
		"drift.md:5: outbox relay --relay-batch-size lots",
		"drift.md:7: outbox dead show: accepts 1 arg(s), received 0",
		"drift.md:10: outbox replay --id 0190d6d2-0000-7000-8000-000000000000: --reason is required",
		"drift.md:11: outbox purge --older-than 24: invalid argument",
		`drift.md:11: outbox dead show o-1: event id "o-1" is not a UUID`,
		"drift.md:16: outbox replay",
		"drift.md:18: `outbox replay --id ID… [--since 24h] [--yess]`: \"outbox replay\" has no flag --yess",
		"drift.md:19: `outbox statsu`: unknown subcommand \"statsu\" of \"outbox\"",
	}
	if len(got) != len(want) {
		t.Fatalf("want %d problems, got %d:\n%s", len(want), len(got), strings.Join(got, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("problem %d:\n got %s\nwant %s…", i, got[i], want[i])
		}
	}
	if !strings.Contains(got[7], "--actr") {
		t.Errorf("problem 7 does not name the flag: %s", got[7])
	}
}

// sqlBlock is a ```sql block of a document, runnable or not.
type sqlBlock struct {
	where  string
	sql    string
	reason string // set: not run, and why
}

func sqlBlocks(d docText) []sqlBlock {
	var out []sqlBlock
	for _, b := range d.blocks {
		if b.lang != "sql" {
			continue
		}
		s := sqlBlock{where: fmt.Sprintf("%s:%d", d.name, b.line), sql: strings.Join(b.lines, "\n")}
		if m := notRunMarker.FindStringSubmatch(s.sql); m != nil {
			s.reason = strings.TrimSpace(m[1])
			if s.reason == "" {
				s.reason = "-" // marked without a reason: refused below
			}
		}
		out = append(out, s)
	}
	return out
}

// TestDocSQLRuns: every ```sql block of README.md and docs/*.md runs against a migrated
// database, in a transaction rolled back after it, unless it carries the comment
// "-- not run by the doc test: <reason>".
func TestDocSQLRuns(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, pgtest.ConnString(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	ran, skipped := 0, 0
	for _, f := range docFiles(t) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range sqlBlocks(parseDoc(strings.TrimPrefix(f, repoRoot+"/"), string(b))) {
			switch s.reason {
			case "-":
				t.Errorf("%s: marked not runnable without a reason", s.where)
				continue
			case "":
			default:
				skipped++
				continue
			}
			ran++
			err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, s.sql, pgx.QueryExecModeSimpleProtocol); err != nil {
					return err
				}
				return errRollback
			})
			if err != errRollback { //nolint:errorlint // our own sentinel, returned as is
				t.Errorf("%s: the SQL block fails: %v\n%s", s.where, err, s.sql)
			}
		}
	}
	t.Logf("%d SQL blocks ran, %d marked not runnable", ran, skipped)
	if ran == 0 {
		t.Error("no SQL block of the docs ran: the scanner is broken")
	}
}

// errRollback makes pgx.BeginFunc roll back a block that succeeded.
var errRollback = fmt.Errorf("roll back")

// TestRunbookHasEveryAlert: docs/operations.md has a runbook section ("### Name") for every
// alert of docs/alerts.yaml, and no section named like an alert that is not there.
func TestRunbookHasEveryAlert(t *testing.T) {
	t.Parallel()
	rules, err := os.ReadFile(filepath.Join(repoRoot, "docs", "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ops, err := os.ReadFile(filepath.Join(repoRoot, "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	alerts := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s*- alert: (\S+)`).FindAllStringSubmatch(string(rules), -1) {
		alerts[m[1]] = true
	}
	sections := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^### (Outbox\S+)$`).FindAllStringSubmatch(string(ops), -1) {
		sections[m[1]] = true
	}
	if len(alerts) < 8 {
		t.Fatalf("only %d alerts found in docs/alerts.yaml", len(alerts))
	}
	for a := range alerts {
		if !sections[a] {
			t.Errorf("docs/operations.md has no runbook section \"### %s\"", a)
		}
	}
	for s := range sections {
		if !alerts[s] {
			t.Errorf("docs/operations.md has a runbook section for %s, which docs/alerts.yaml does not define", s)
		}
	}
}

// TestDocConfigFilesLoad: every ```yaml block of docs/configuration.md is a configuration
// file the command loads (every key known, every value valid).
func TestDocConfigFilesLoad(t *testing.T) {
	t.Parallel()
	name := filepath.Join(repoRoot, "docs", "configuration.md")
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, blk := range parseDoc("docs/configuration.md", string(b)).blocks {
		if blk.lang != "yaml" {
			continue
		}
		n++
		path := filepath.Join(t.TempDir(), "outbox.yaml")
		if err := os.WriteFile(path, []byte(strings.Join(blk.lines, "\n")), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg := defaults()
		if err := loadFile(&cfg, path); err != nil {
			t.Errorf("docs/configuration.md:%d: the YAML example does not load: %v", blk.line, err)
		}
	}
	if n == 0 {
		t.Error("docs/configuration.md has no YAML example")
	}
}

// TestDocMakeTargetsExist: every `make TARGET` in a shell block of README.md and
// docs/*.md names a target of the Makefile.
func TestDocMakeTargetsExist(t *testing.T) {
	t.Parallel()
	mk, err := os.ReadFile(filepath.Join(repoRoot, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^([a-z][a-z-]*):`).FindAllStringSubmatch(string(mk), -1) {
		targets[m[1]] = true
	}
	for _, f := range docFiles(t) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		d := parseDoc(strings.TrimPrefix(f, repoRoot+"/"), string(b))
		for _, blk := range d.blocks {
			if !shellLangs[blk.lang] {
				continue
			}
			for i, line := range blk.lines {
				words, err := shellWords(line)
				if err != nil {
					continue // shellCommands reports it
				}
				for _, seg := range words {
					if len(seg) > 1 && seg[0] == "make" && !targets[seg[1]] && !strings.Contains(seg[1], "=") {
						t.Errorf("%s:%d: make %s: no such target in the Makefile", d.name, blk.line+i, seg[1])
					}
				}
			}
		}
	}
}
