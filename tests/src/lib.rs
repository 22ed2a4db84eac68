//! Shared fixtures for toold's end-to-end tests: temporary trees built from strings.
