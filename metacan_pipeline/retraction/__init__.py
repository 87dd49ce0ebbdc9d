"""Retraction Watch: the Crossref Labs export read, archived and joined to the frame."""
