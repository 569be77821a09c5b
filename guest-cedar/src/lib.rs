//! The built-in Cedar policy component (issue 16). Work in progress.
