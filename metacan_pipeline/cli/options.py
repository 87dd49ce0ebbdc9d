"""Options shared by the command groups."""

DATA_DIR_HELP = "Output folder (default $METACAN_DATA_DIR or ./data)."
