"""`kubectl kohort`: where queues stand and where a job is, read from the API server."""
