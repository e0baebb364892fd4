"""What a deployment watches: OpenTelemetry traces (:mod:`.tracing`) and metrics
(:mod:`.metrics`). Both are no-ops without ``opentelemetry-api``."""
