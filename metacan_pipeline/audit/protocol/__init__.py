"""The audit protocol, locked before any coding, and the audit sample's design."""
