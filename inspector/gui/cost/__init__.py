"""The Cost model tab: what a verify batch costs the target on this machine."""
