// Package runbooks holds the operator procedures of adclick, one Markdown
// page per situation (see README.md), and the test that keeps them honest:
// every `adclick …` command quoted in a page's sh blocks is checked against
// the real binary's `--help`, every metric a page names must be registered
// somewhere in the code, and every HTTP path it quotes must be served by
// the api package. The package has no Go API of its own.
package runbooks
