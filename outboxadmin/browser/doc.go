// Package browser tests the outboxadmin dashboard in a real browser — Debian's chromium
// at /usr/bin/chromium, driven headless by chromedp — in a module of its own so the root
// module keeps no test dependencies: the pages load, their numbers are the database's, a
// dead event replayed through a page is then published by a relay, every page's
// screenshot is saved as a test artifact and checked not blank, and every form input has
// a label and every text its contrast.
package browser
