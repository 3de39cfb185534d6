//! A request body's bytes as they arrive: segments as large as the room the body took in the body
//! budget, joined at most once.

/// Request bodies up to this size are read without touching the body budget (every chat call of
/// ordinary size), in one buffer: 1 MiB.
pub const SMALL_BODY_BYTES: u64 = 1024 * 1024;

/// A body's bytes as they arrive, in segments that are never copied while the body grows.
///
/// Growing one buffer copies it at every step, and the allocator keeps the old blocks for a while:
/// a 60 MiB body grown a quarter at a time left 160 MiB resident. Here a small body grows one
/// buffer (at most [`SMALL_BODY_BYTES`]); past that, each new segment is exactly the room the body
/// has taken in the budget and not yet filled. When the room is the body's whole declared length
/// (taken once a quarter of it has arrived), what arrived so far is copied once into one buffer of
/// that length and the rest goes straight into it; a body of unknown length is joined once, at the
/// end. Memory follows the bytes that arrived (and the room they paid for), never a length a
/// client merely declared (up to 600 MiB).
#[derive(Debug, Default)]
pub(super) struct Segments {
    /// Full segments, in order.
    full: Vec<Vec<u8>>,
    /// The bytes in `full`.
    full_len: u64,
    /// The segment being filled.
    current: Vec<u8>,
}

impl Segments {
    /// The bytes received so far.
    pub(super) fn len(&self) -> u64 {
        self.full_len + self.current.len() as u64
    }

    /// The capacity held in all segments.
    fn capacity(&self) -> u64 {
        self.full.iter().map(|s| s.capacity() as u64).sum::<u64>() + self.current.capacity() as u64
    }

    /// Appends `data`. `room` is what the body may hold in all (the budget it has taken, at least
    /// [`SMALL_BODY_BYTES`], at most its declared length), and `whole` says that `room` is the body's
    /// entire length; the bytes received always fit, whatever `room` says.
    pub(super) fn push(&mut self, mut data: &[u8], room: u64, whole: bool) {
        let spare = self.current.capacity() - self.current.len();
        if data.len() <= spare {
            self.current.extend_from_slice(data);
            return;
        }
        if self.full.is_empty() && self.len() + data.len() as u64 <= SMALL_BODY_BYTES {
            // Small: one buffer, doubling, never past what a small body may hold.
            let want = (self.current.capacity() as u64 * 2).min(room).max(self.len() + data.len() as u64);
            self.current.reserve_exact(usize::try_from(want).unwrap_or(usize::MAX) - self.current.len());
            self.current.extend_from_slice(data);
            return;
        }
        if whole {
            // The last segment: the body's whole length, holding what came before.
            let mut one =
                Vec::with_capacity(usize::try_from(room.max(self.len() + data.len() as u64)).unwrap_or(usize::MAX));
            for segment in
                std::mem::take(&mut self.full).into_iter().chain(std::iter::once(std::mem::take(&mut self.current)))
            {
                one.extend_from_slice(&segment);
            }
            one.extend_from_slice(data);
            self.full_len = 0;
            self.current = one;
            return;
        }
        // Fill what is left of this segment, then start one as large as the rest of the room.
        let (head, tail) = data.split_at(spare);
        self.current.extend_from_slice(head);
        data = tail;
        let next = room.saturating_sub(self.capacity()).max(data.len() as u64);
        let next = Vec::with_capacity(usize::try_from(next).unwrap_or(usize::MAX));
        let done = std::mem::replace(&mut self.current, next);
        if !done.is_empty() {
            self.full_len += done.len() as u64;
            self.full.push(done);
        }
        self.current.extend_from_slice(data);
    }

    /// The body in one buffer of its length; a body that fit in one segment is not copied.
    pub(super) fn into_vec(self) -> Vec<u8> {
        if self.full.is_empty() {
            return self.current;
        }
        let mut out = Vec::with_capacity(usize::try_from(self.len()).unwrap_or(usize::MAX));
        for segment in self.full.into_iter().chain(std::iter::once(self.current)) {
            out.extend_from_slice(&segment);
            // Each segment is given back as soon as it is copied.
            drop(segment);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_buffer_grows_with_what_arrived_not_with_what_was_declared() {
        let mib = 1024 * 1024;
        // 600 MiB declared, ten bytes sent: ten bytes of buffer.
        let mut small = Segments::default();
        small.push(&[1; 10], mib, false);
        assert_eq!((small.len(), small.capacity()), (10, 10));
        // Doubling while small, never past the room.
        small.push(&[2], mib, false);
        assert_eq!(small.capacity(), 20);
        small.push(&vec![3; 900 * 1024], mib, false);
        assert!(small.capacity() <= mib, "{}", small.capacity());
        // A large body: segments as large as the room it took, never copied while it grows.
        let mut large = Segments::default();
        let mut sent = Vec::new();
        let mut room = mib;
        for i in 0..200u32 {
            let chunk = vec![u8::try_from(i % 251).expect("byte"); 64 * 1024 + usize::try_from(i).expect("i")];
            if large.len() + chunk.len() as u64 > room {
                room += (large.len() + chunk.len() as u64 - room).max(mib).max(room / 4);
            }
            large.push(&chunk, room, false);
            sent.extend_from_slice(&chunk);
            assert!(large.capacity() <= room, "capacity {} past the room {room}", large.capacity());
            assert!(large.capacity() >= large.len());
        }
        assert!(large.full.len() > 3, "{} segments", large.full.len());
        assert_eq!(large.into_vec(), sent, "joined in order");
        // Whatever the room says, the bytes received fit.
        let mut odd = Segments::default();
        odd.push(&vec![7; 3 * usize::try_from(mib).expect("mib")], mib, false);
        assert_eq!(odd.into_vec().len() as u64, 3 * mib);
        // Once the room is the whole declared length, one buffer of that length and no join.
        let declared = 8 * mib;
        let (mut known, mut sent, mut room) = (Segments::default(), Vec::new(), mib);
        for i in 0..128u32 {
            let chunk = vec![u8::try_from(i % 251).expect("byte"); 64 * 1024];
            let len = known.len() + chunk.len() as u64;
            if len > room {
                room = if len * 4 >= declared { declared } else { room + (len - room).max(mib).max(room / 4) };
            }
            known.push(&chunk, room, room == declared);
            sent.extend_from_slice(&chunk);
            assert!(known.capacity() <= room.max(mib));
        }
        assert!(known.full.is_empty(), "{} segments", known.full.len());
        assert_eq!(known.current.capacity() as u64, declared);
        assert_eq!(known.into_vec(), sent);
    }
}
