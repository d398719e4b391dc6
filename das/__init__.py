"""DAS: disclosure avoidance for detailed census tables (engine; never imports Prefect)."""
