//! (tests added by this session)
