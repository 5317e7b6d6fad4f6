//! The memory adapters' lock: a poisoned mutex is taken over, not a panic of its own (a panic
//! while holding it cannot leave a memory adapter's state half-written in a way a later call
//! would misread: each change is made in full under the lock).

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `mutex`, taking over a poisoned one.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
