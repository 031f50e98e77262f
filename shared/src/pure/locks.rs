//! Lock guards that survive poisoning: a panic elsewhere while a lock was held must not
//! make every later admission review panic too (the data is still the last consistent
//! write; every writer here leaves it consistent between statements).

use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Reads `lock`, poisoned or not.
pub fn read<T>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    lock.read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Writes `lock`, poisoned or not.
pub fn write<T>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    lock.write()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
