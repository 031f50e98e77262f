//! Helpers for controller end-to-end tests (owned by the controller work).
