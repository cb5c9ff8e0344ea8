"""What a schedule costs in quality: ``loss_prior`` (the published tables), ``quality_profile`` (a
measured profile file that overrides the prior) and ``quality_runs`` (the grid of real runs that
measures one; it imports the trainer only when it trains)."""
