"""Job templates, instance-side scripts and GitHub workflow templates (data files)."""
