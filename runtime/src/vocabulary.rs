//! A checkpoint's vocabulary as bytes, for constrained sampling: each
//! token's bytes, and a trie of them, so the tokens that may continue a
//! JSON value are found by one walk that feeds each shared prefix once and
//! skips every token under a byte the value cannot take (most of a
//! 150,000-token vocabulary, outside a string) instead of feeding every
//! token from its first byte.
//!
//! The trie is flat, in preorder: node `i`'s first child is `i + 1`, the
//! next sibling of a child `c` is `subtree_end[c]`; the tokens whose bytes
//! end at a node are `ids[first_id[i]..first_id[i + 1]]`, and those of its
//! subtree `ids[first_id[i]..first_id[subtree_end[i]]]`.
//!
//! Inside a JSON string most tokens are taken whole: a subtree whose
//! tokens are all plain string text (`json_mode::plain_in_string`) is
//! marked at once where the value is inside a string with nothing pending,
//! without feeding its bytes.

/// A model's vocabulary as constrained sampling reads it, shared.
pub type TokenBytes = std::sync::Arc<Vocabulary>;

/// Each token's bytes (empty: a control token, which spells none) and their trie.
#[derive(Debug)]
pub struct Vocabulary {
    bytes: Vec<Box<[u8]>>,
    /// Per node: the byte that leads to it (the root's unused).
    byte: Vec<u8>,
    /// Per node: one past the last node of its subtree.
    subtree_end: Vec<u32>,
    /// Per node, and one past the last: where its tokens start in `ids`.
    first_id: Vec<u32>,
    ids: Vec<u32>,
    /// Per node: every token of its subtree is plain string text.
    plain: Vec<bool>,
}

impl Vocabulary {
    pub fn new(bytes: Vec<Box<[u8]>>) -> Vocabulary {
        let mut order: Vec<u32> = (0..bytes.len() as u32).filter(|&i| !bytes[i as usize].is_empty()).collect();
        order.sort_by(|&a, &b| bytes[a as usize].cmp(&bytes[b as usize]).then(a.cmp(&b)));
        let mut v = Vocabulary { bytes, byte: vec![0], subtree_end: vec![0], first_id: vec![0], ids: vec![], plain: vec![] };
        v.subtree_end[0] = v.build(&order, 0) as u32;
        v.first_id.push(v.ids.len() as u32);
        // Children come after their parent: filled from the last node back.
        v.plain = vec![false; v.byte.len()];
        for node in (0..v.byte.len()).rev() {
            let own = v.ids[v.first_id[node] as usize..v.first_id[node + 1] as usize]
                .iter()
                .all(|&t| crate::json_mode::plain_in_string(&v.bytes[t as usize]));
            let (mut child, end) = (node + 1, v.subtree_end[node] as usize);
            let mut all = own;
            while child < end && all {
                all = v.plain[child];
                child = v.subtree_end[child] as usize;
            }
            v.plain[node] = all;
        }
        v
    }

    /// Add the children of the node just pushed: `sorted` (token ids by
    /// bytes) all share their first `depth` bytes. Returns the end of its subtree.
    fn build(&mut self, sorted: &[u32], depth: usize) -> usize {
        let mut i = 0;
        while i < sorted.len() {
            let b = self.bytes[sorted[i] as usize][depth];
            let n = sorted[i..].iter().take_while(|&&t| self.bytes[t as usize][depth] == b).count();
            let group = &sorted[i..i + n];
            let node = self.byte.len();
            self.byte.push(b);
            self.subtree_end.push(0);
            self.first_id.push(self.ids.len() as u32);
            // Sorted by bytes, the tokens ending here come first in their group.
            let ending = group.iter().take_while(|&&t| self.bytes[t as usize].len() == depth + 1).count();
            self.ids.extend_from_slice(&group[..ending]);
            self.subtree_end[node] = self.build(&group[ending..], depth + 1) as u32;
            i += n;
        }
        self.byte.len()
    }

    /// Token `id`'s bytes.
    pub fn get(&self, id: usize) -> Option<&[u8]> {
        self.bytes.get(id).map(|b| &b[..])
    }

    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Nodes of the trie (the root included).
    pub fn nodes(&self) -> usize {
        self.byte.len()
    }

    /// Mark in `allowed` every token whose bytes `step` accepts one after
    /// another from `state` (`in_string`: the state is inside a string with
    /// nothing pending, where plain subtrees are taken whole); returns how
    /// many nodes were fed a byte.
    pub fn walk<S: Clone>(&self, state: &S, step: &impl Fn(&mut S, u8) -> bool, in_string: &impl Fn(&S) -> bool, allowed: &mut [bool]) -> usize {
        self.walk_children(0, state, step, in_string, allowed)
    }

    fn walk_children<S: Clone>(
        &self,
        node: usize,
        state: &S,
        step: &impl Fn(&mut S, u8) -> bool,
        in_string: &impl Fn(&S) -> bool,
        allowed: &mut [bool],
    ) -> usize {
        let (mut child, end) = (node + 1, self.subtree_end[node] as usize);
        let mut fed = 0;
        let clean = in_string(state);
        while child < end {
            if clean && self.plain[child] {
                let after = self.subtree_end[child] as usize;
                for &id in &self.ids[self.first_id[child] as usize..self.first_id[after] as usize] {
                    allowed[id as usize] = true;
                }
                child = after;
                continue;
            }
            let mut s = state.clone();
            fed += 1;
            if step(&mut s, self.byte[child]) {
                for &id in &self.ids[self.first_id[child] as usize..self.first_id[child + 1] as usize] {
                    allowed[id as usize] = true;
                }
                fed += self.walk_children(child, &s, step, in_string, allowed);
            }
            child = self.subtree_end[child] as usize;
        }
        fed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocab(words: &[&str]) -> Vocabulary {
        Vocabulary::new(words.iter().map(|w| w.as_bytes().to_vec().into_boxed_slice()).collect())
    }

    /// Every token a prefix predicate accepts is found, and only those;
    /// shared prefixes are fed once.
    #[test]
    fn the_walk_finds_what_feeding_each_token_finds() {
        let words = ["ab", "a", "abc", "", "b", "abd", "ab", "ba", "c"];
        let v = vocab(&words);
        // A "state" that accepts bytes spelling a prefix of "abcab".
        let target = b"abcab";
        let step = |at: &mut usize, b: u8| {
            let ok = target.get(*at) == Some(&b);
            *at += 1;
            ok
        };
        let mut allowed = vec![false; words.len()];
        let fed = v.walk(&0usize, &step, &|_: &usize| false, &mut allowed);
        let want: Vec<bool> = words.iter().map(|w| !w.is_empty() && target.starts_with(w.as_bytes())).collect();
        assert_eq!(allowed, want);
        // Nodes: a, ab, abc, abd, b, ba, c; fed: a, b, c (root's), ab (a's), abc, abd (ab's).
        assert_eq!((v.nodes(), fed), (8, 6));
    }
}
