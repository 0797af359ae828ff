"""Frame-queue runner: decode -> windows -> batches -> backend -> encode."""
