"""Figures stage: seaborn figures drawn from the database alone (PNG for reports, PDF for papers)."""
