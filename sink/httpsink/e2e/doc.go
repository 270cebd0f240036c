// Package e2e tests package httpsink end to end, in a module of its own so that the
// root module keeps no test dependencies: against real net/http servers whose every
// request is verified by the Standard Webhooks project's own Go library (an
// implementation independent of httpsink's), through an in-process TCP proxy
// (toxiproxy) for outages, and through the relay.
package e2e
