//! Locks whose value stays usable after a panic elsewhere. Every value toold keeps behind a
//! lock is changed by whole assignments, inserts and removes, never left half-changed by a
//! panic, so a poisoned lock's value is still sound: these take it as it is instead of
//! spreading the panic to every later user.

use std::sync::{Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// [`Mutex::lock`], [`Mutex::get_mut`] and [`Mutex::into_inner`], poisoned or not.
pub trait LockUnpoisoned<T> {
    fn lock_unpoisoned(&self) -> MutexGuard<'_, T>;
    fn get_mut_unpoisoned(&mut self) -> &mut T;
    fn into_inner_unpoisoned(self) -> T;
}

impl<T> LockUnpoisoned<T> for Mutex<T> {
    fn lock_unpoisoned(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn get_mut_unpoisoned(&mut self) -> &mut T {
        self.get_mut().unwrap_or_else(PoisonError::into_inner)
    }

    fn into_inner_unpoisoned(self) -> T {
        self.into_inner().unwrap_or_else(PoisonError::into_inner)
    }
}

/// [`RwLock::read`], [`RwLock::write`] and [`RwLock::get_mut`], poisoned or not.
pub trait RwLockUnpoisoned<T> {
    fn read_unpoisoned(&self) -> RwLockReadGuard<'_, T>;
    fn write_unpoisoned(&self) -> RwLockWriteGuard<'_, T>;
    fn get_mut_unpoisoned(&mut self) -> &mut T;
}

impl<T> RwLockUnpoisoned<T> for RwLock<T> {
    fn get_mut_unpoisoned(&mut self) -> &mut T {
        self.get_mut().unwrap_or_else(PoisonError::into_inner)
    }

    fn read_unpoisoned(&self) -> RwLockReadGuard<'_, T> {
        self.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write_unpoisoned(&self) -> RwLockWriteGuard<'_, T> {
        self.write().unwrap_or_else(PoisonError::into_inner)
    }
}
