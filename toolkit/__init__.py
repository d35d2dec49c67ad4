"""pmtk: practice-management API toolkit."""
