//! The leader engine's free list of page ids: which pages of its pool no request holds.
//!
//! Page ids are the same on every rank (the leader's scheduler picks them and every rank uses
//! the same ids), so only the leader engine keeps a free list. Owns allocation bookkeeping
//! only; it never touches page bytes.

use std::collections::VecDeque;

use tandem_proto::ids::PageId;

/// A page returned that was not held, or a page id outside the pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PageError {
    /// The page was already free.
    #[error("page {page} was freed twice")]
    DoubleFree {
        /// The page.
        page: u32,
    },
    /// The page id is not in the pool.
    #[error("page {page} is out of range: the pool has {pages} pages")]
    OutOfRange {
        /// The page.
        page: u32,
        /// Pages in the pool.
        pages: u32,
    },
}

/// Free pages of a pool of `pages` pages, handed out first-in first-out (so a freed page is
/// reused as late as possible, which makes a premature reuse more likely to be caught).
#[derive(Clone, Debug)]
pub struct PageFreeList {
    free: VecDeque<PageId>,
    held: Vec<bool>,
}

impl PageFreeList {
    /// All `pages` pages free.
    pub fn new(pages: u32) -> Self {
        PageFreeList {
            free: (0..pages).map(PageId).collect(),
            held: vec![false; pages as usize],
        }
    }

    /// Pages in the pool.
    pub fn pages(&self) -> u32 {
        self.held.len() as u32
    }

    /// Pages free now.
    pub fn free(&self) -> u32 {
        self.free.len() as u32
    }

    /// Take `n` pages, or none (and `None`) when fewer than `n` are free.
    pub fn take(&mut self, n: usize) -> Option<Vec<PageId>> {
        if n > self.free.len() {
            return None;
        }
        let pages: Vec<PageId> = self.free.drain(..n).collect();
        for page in &pages {
            self.held[page.0 as usize] = true;
        }
        Some(pages)
    }

    /// Return held pages.
    ///
    /// # Errors
    /// [`PageError::DoubleFree`] or [`PageError::OutOfRange`]; pages before the bad one are
    /// returned, the rest are not.
    pub fn give(&mut self, pages: &[PageId]) -> Result<(), PageError> {
        let total = self.pages();
        for &page in pages {
            let held = self
                .held
                .get_mut(page.0 as usize)
                .ok_or(PageError::OutOfRange {
                    page: page.0,
                    pages: total,
                })?;
            if !*held {
                return Err(PageError::DoubleFree { page: page.0 });
            }
            *held = false;
            self.free.push_back(page);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn take_and_give_are_fifo_and_bounded() {
        let mut list = PageFreeList::new(4);
        let a = list.take(3).unwrap();
        assert_eq!(a, vec![PageId(0), PageId(1), PageId(2)]);
        assert_eq!(list.free(), 1);
        assert_eq!(list.take(2), None, "not enough: nothing taken");
        assert_eq!(list.free(), 1);
        list.give(&a[..1]).unwrap();
        assert_eq!(
            list.take(2).unwrap(),
            vec![PageId(3), PageId(0)],
            "oldest free page first"
        );
        assert_eq!(list.take(0), Some(vec![]));
        assert_eq!(list.pages(), 4);
    }

    #[test]
    fn double_free_and_out_of_range_are_refused() {
        let mut list = PageFreeList::new(2);
        let pages = list.take(1).unwrap();
        list.give(&pages).unwrap();
        let err = list.give(&pages).unwrap_err();
        assert_eq!(err, PageError::DoubleFree { page: 0 });
        assert_eq!(err.to_string(), "page 0 was freed twice");
        let err = list.give(&[PageId(9)]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "page 9 is out of range: the pool has 2 pages"
        );
    }
}
