"""Published outputs: per-work JSON records and HTML pages, the index, and the SPEC section 8 check."""
