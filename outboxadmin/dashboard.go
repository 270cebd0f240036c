package outboxadmin

// dashboardRoutes registers the dashboard's pages (slice 2).
func (h *Handler) dashboardRoutes() {}
