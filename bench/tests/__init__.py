"""bench's own tests: its report renderers and helpers, called directly (no benchmark runs here)."""
