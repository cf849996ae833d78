"""`verlenv lint-config`: find verl config mistakes that Hydra accepts silently, before a job is queued."""
