"""OpenAlex inputs: file readers for every record shape, work JSON to typed rows, abstracts."""
