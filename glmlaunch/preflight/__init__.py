"""GPU preflight: build the real pools and plans on the TP group, measure them, fail fast."""
