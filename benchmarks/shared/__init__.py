"""What every page shares: timing and the machine line (common), the page header (page),
run keys over the code a simulated run executes (run_keys), the page listing (pages) and
the orphan check of results/ (orphans)."""
