//! Merkle trees as RFC 6962 §2.1 defines them (the hashing RFC 9162 §2.1 keeps): the audit
//! records are the leaves, a checkpoint signs a tree's size and root, and proofs show that a
//! record is in a tree (inclusion) or that a tree extends an earlier one (consistency).
//!
//! - a leaf's hash is `SHA-256(0x00 || bytes)`, an inner node's `SHA-256(0x01 || left ||
//!   right)`; the empty tree's root is `SHA-256()` of nothing;
//! - a tree of `n > 1` leaves splits at `k`, the largest power of two below `n`: its left
//!   subtree holds the first `k` leaves, its right subtree the rest;
//! - [`Tree::inclusion_proof`] is `PATH(m, D[n])` of §2.1.1, [`Tree::consistency_proof`] is
//!   `PROOF(m, D[n])` of §2.1.2; [`verify_inclusion`] and [`verify_consistency`] are the
//!   checks of RFC 9162 §2.1.3.2 and §2.1.4.2, which need no leaves, only the proof and the
//!   roots.
//!
//! A [`Tree`] keeps every leaf's hash (32 bytes a record) and computes subtrees from them,
//! each proof or root in time linear in the tree's size: for a command that reads a whole log
//! anyway. A [`Frontier`] keeps only the roots of the tree's full subtrees (at most 64 of
//! them) and gives the root of everything added so far: for a gateway that signs checkpoints
//! of a log as it grows.

use sha2::{Digest, Sha256};

/// A SHA-256 hash: a leaf's, a node's or a root.
pub type Hash = [u8; 32];

/// The hash of a leaf holding `bytes`: `SHA-256(0x00 || bytes)`.
#[must_use]
pub fn leaf_hash(bytes: &[u8]) -> Hash {
    let mut hasher = Sha256::new();
    hasher.update([0x00]);
    hasher.update(bytes);
    hasher.finalize().into()
}

/// The hash of an inner node: `SHA-256(0x01 || left || right)`.
#[must_use]
pub fn node_hash(left: &Hash, right: &Hash) -> Hash {
    let mut hasher = Sha256::new();
    hasher.update([0x01]);
    hasher.update(left);
    hasher.update(right);
    hasher.finalize().into()
}

/// The root of the empty tree: `SHA-256()` of no bytes.
#[must_use]
pub fn empty_root() -> Hash {
    Sha256::digest([]).into()
}

/// The largest power of two strictly below `n` (`n >= 2`): where a tree of `n` leaves splits.
fn split(n: usize) -> usize {
    let mut k = 1;
    while k << 1 < n {
        k <<= 1;
    }
    k
}

/// Why a proof cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProofError {
    /// The leaf is not in the tree.
    #[error("leaf {index} is not in a tree of {size} leaves")]
    NoLeaf {
        /// The leaf's index, from 0.
        index: u64,
        /// The tree's size.
        size: u64,
    },
    /// The tree asked about is larger than the leaves known.
    #[error("a tree of {size} leaves was asked for, but only {known} are known")]
    TooLarge {
        /// The size asked for.
        size: u64,
        /// The leaves known.
        known: u64,
    },
    /// A consistency proof from a larger tree to a smaller one.
    #[error("no consistency proof from a tree of {old} leaves to a smaller one of {new}")]
    Shrinks {
        /// The earlier tree's size.
        old: u64,
        /// The later tree's size.
        new: u64,
    },
}

/// The leaves of a tree, by their hashes, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tree {
    leaves: Vec<Hash>,
}

impl Tree {
    /// An empty tree.
    #[must_use]
    pub fn new() -> Tree {
        Tree::default()
    }

    /// Adds a leaf by its hash ([`leaf_hash`] of its bytes).
    pub fn push(&mut self, leaf: Hash) {
        self.leaves.push(leaf);
    }

    /// How many leaves the tree holds.
    #[must_use]
    pub fn size(&self) -> u64 {
        self.leaves.len() as u64
    }

    /// The hash of the leaf at `index`, when there is one.
    #[must_use]
    pub fn leaf(&self, index: u64) -> Option<Hash> {
        usize::try_from(index)
            .ok()
            .and_then(|i| self.leaves.get(i))
            .copied()
    }

    /// The first `size` leaves, or [`ProofError::TooLarge`].
    fn first(&self, size: u64) -> Result<&[Hash], ProofError> {
        usize::try_from(size)
            .ok()
            .and_then(|n| self.leaves.get(..n))
            .ok_or(ProofError::TooLarge {
                size,
                known: self.size(),
            })
    }

    /// The root of the tree of the first `size` leaves (`MTH(D[size])`).
    ///
    /// # Errors
    /// [`ProofError::TooLarge`] when `size` is more than the leaves known.
    pub fn root(&self, size: u64) -> Result<Hash, ProofError> {
        Ok(subtree_root(self.first(size)?))
    }

    /// The inclusion proof of leaf `index` in the tree of the first `size` leaves: the
    /// hashes of `PATH(index, D[size])`, from the leaf's sibling up.
    ///
    /// # Errors
    /// [`ProofError::TooLarge`], or [`ProofError::NoLeaf`] when `index >= size`.
    pub fn inclusion_proof(&self, index: u64, size: u64) -> Result<Vec<Hash>, ProofError> {
        let leaves = self.first(size)?;
        let at = usize::try_from(index)
            .ok()
            .filter(|i| *i < leaves.len())
            .ok_or(ProofError::NoLeaf { index, size })?;
        let mut proof = Vec::new();
        path(at, leaves, &mut proof);
        Ok(proof)
    }

    /// The consistency proof from the tree of the first `old` leaves to the tree of the first
    /// `new`: the hashes of `PROOF(old, D[new])`. Empty when `old` is 0 or `old == new`.
    ///
    /// # Errors
    /// [`ProofError::TooLarge`], or [`ProofError::Shrinks`] when `old > new`.
    pub fn consistency_proof(&self, old: u64, new: u64) -> Result<Vec<Hash>, ProofError> {
        let leaves = self.first(new)?;
        if old > new {
            return Err(ProofError::Shrinks { old, new });
        }
        let mut proof = Vec::new();
        // `old` fits: it is at most `new`, which did.
        let m = usize::try_from(old).unwrap_or(usize::MAX);
        if m > 0 && m < leaves.len() {
            subproof(m, leaves, true, &mut proof);
        }
        Ok(proof)
    }
}

/// `MTH` of `leaves` (RFC 6962 §2.1).
fn subtree_root(leaves: &[Hash]) -> Hash {
    match leaves {
        [] => empty_root(),
        [one] => *one,
        _ => {
            let (left, right) = leaves.split_at(split(leaves.len()));
            node_hash(&subtree_root(left), &subtree_root(right))
        }
    }
}

/// `PATH(m, leaves)` (RFC 6962 §2.1.1), appended to `proof` from the leaf up.
fn path(m: usize, leaves: &[Hash], proof: &mut Vec<Hash>) {
    if leaves.len() <= 1 {
        return;
    }
    let (left, right) = leaves.split_at(split(leaves.len()));
    if m < left.len() {
        path(m, left, proof);
        proof.push(subtree_root(right));
    } else {
        path(m - left.len(), right, proof);
        proof.push(subtree_root(left));
    }
}

/// `SUBPROOF(m, leaves, whole)` (RFC 6962 §2.1.2), appended to `proof`.
fn subproof(m: usize, leaves: &[Hash], whole: bool, proof: &mut Vec<Hash>) {
    if m == leaves.len() {
        if !whole {
            proof.push(subtree_root(leaves));
        }
        return;
    }
    let (left, right) = leaves.split_at(split(leaves.len()));
    if m <= left.len() {
        subproof(m, left, whole, proof);
        proof.push(subtree_root(right));
    } else {
        subproof(m - left.len(), right, false, proof);
        proof.push(subtree_root(left));
    }
}

/// Whether `proof` shows that `leaf` is leaf `index` of the tree of `size` leaves whose root
/// is `root` (RFC 9162 §2.1.3.2).
#[must_use]
pub fn verify_inclusion(index: u64, size: u64, leaf: &Hash, proof: &[Hash], root: &Hash) -> bool {
    if index >= size {
        return false;
    }
    let (mut f, mut s) = (index, size - 1);
    let mut r = *leaf;
    for p in proof {
        if s == 0 {
            return false;
        }
        if f & 1 == 1 || f == s {
            r = node_hash(p, &r);
            while f & 1 == 0 && f != 0 {
                f >>= 1;
                s >>= 1;
            }
        } else {
            r = node_hash(&r, p);
        }
        f >>= 1;
        s >>= 1;
    }
    s == 0 && r == *root
}

/// Whether `proof` shows that the tree of `new` leaves with root `new_root` extends the tree
/// of `old` leaves with root `old_root`: the first `old` leaves are the same (RFC 9162
/// §2.1.4.2). From the empty tree every tree extends; between equal sizes the roots must be
/// equal and the proof empty.
#[must_use]
pub fn verify_consistency(
    old: u64,
    new: u64,
    old_root: &Hash,
    new_root: &Hash,
    proof: &[Hash],
) -> bool {
    if old > new {
        return false;
    }
    if old == 0 {
        return proof.is_empty() && *old_root == empty_root();
    }
    if old == new {
        return proof.is_empty() && old_root == new_root;
    }
    let mut hashes = proof.iter();
    // When `old` is a power of two, its root is a node of the new tree and the proof leaves
    // it out.
    let first = if old.is_power_of_two() {
        Some(old_root)
    } else {
        hashes.next()
    };
    let Some(first) = first else {
        return false;
    };
    let (mut f, mut s) = (old - 1, new - 1);
    while f & 1 == 1 {
        f >>= 1;
        s >>= 1;
    }
    let (mut fr, mut sr) = (*first, *first);
    for c in hashes {
        if s == 0 {
            return false;
        }
        if f & 1 == 1 || f == s {
            fr = node_hash(c, &fr);
            sr = node_hash(c, &sr);
            while f & 1 == 0 && f != 0 {
                f >>= 1;
                s >>= 1;
            }
        } else {
            sr = node_hash(&sr, c);
        }
        f >>= 1;
        s >>= 1;
    }
    fr == *old_root && sr == *new_root && s == 0
}

/// The roots of the full subtrees of a growing tree, largest first: enough to give the root of
/// every leaf added so far without keeping the leaves.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Frontier {
    /// `(leaves, root)` of each full subtree; the counts are decreasing powers of two whose
    /// sum is `size`.
    subtrees: Vec<(u64, Hash)>,
    size: u64,
}

impl Frontier {
    /// The frontier of the empty tree.
    #[must_use]
    pub fn new() -> Frontier {
        Frontier::default()
    }

    /// Adds a leaf by its hash.
    pub fn push(&mut self, leaf: Hash) {
        let mut carry = (1u64, leaf);
        while let Some(&(count, left)) = self.subtrees.last() {
            if count != carry.0 {
                break;
            }
            self.subtrees.pop();
            carry = (count << 1, node_hash(&left, &carry.1));
        }
        self.subtrees.push(carry);
        self.size += 1;
    }

    /// How many leaves were added.
    #[must_use]
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The root of the tree of every leaf added.
    #[must_use]
    pub fn root(&self) -> Hash {
        let mut subtrees = self.subtrees.iter().rev();
        let Some(&(_, mut root)) = subtrees.next() else {
            return empty_root();
        };
        for (_, left) in subtrees {
            root = node_hash(left, &root);
        }
        root
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn tree_of(n: u64) -> Tree {
        let mut tree = Tree::new();
        for i in 0..n {
            tree.push(leaf_hash(&i.to_be_bytes()));
        }
        tree
    }

    /// The eight leaves of the test vectors the Certificate Transparency implementations
    /// share (certificate-transparency-go `merkletree` tests, Trillian's `rfc6962` tests).
    fn ct_leaves() -> Vec<Vec<u8>> {
        vec![
            vec![],
            vec![0x00],
            vec![0x10],
            vec![0x20, 0x21],
            vec![0x30, 0x31],
            vec![0x40, 0x41, 0x42, 0x43],
            vec![0x50, 0x51, 0x52, 0x53, 0x54, 0x55, 0x56, 0x57],
            (0x60..=0x6f).collect(),
        ]
    }

    #[test]
    fn roots_match_the_certificate_transparency_test_vectors() {
        let mut tree = Tree::new();
        for leaf in ct_leaves() {
            tree.push(leaf_hash(&leaf));
        }
        let roots = [
            "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
            "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
            "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
            "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
            "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
            "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
            "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
        ];
        assert_eq!(
            hex::encode(tree.root(0).unwrap()),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        for (size, root) in (1..).zip(roots) {
            assert_eq!(hex::encode(tree.root(size).unwrap()), root, "size {size}");
        }
    }

    #[test]
    fn proofs_match_the_certificate_transparency_test_vectors() {
        let mut tree = Tree::new();
        for leaf in ct_leaves() {
            tree.push(leaf_hash(&leaf));
        }
        let hexes = |proof: Vec<Hash>| proof.into_iter().map(hex::encode).collect::<Vec<_>>();
        let path_of_leaf_0 = [
            "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        ];
        assert_eq!(hexes(tree.inclusion_proof(0, 8).unwrap()), path_of_leaf_0);
        assert_eq!(hexes(tree.consistency_proof(1, 8).unwrap()), path_of_leaf_0);
        assert_eq!(
            hexes(tree.consistency_proof(6, 8).unwrap()),
            [
                "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
                "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
                "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
            ]
        );
        assert!(tree.consistency_proof(1, 1).unwrap().is_empty());
    }

    #[test]
    fn a_proof_past_the_tree_or_backwards_is_refused() {
        let tree = tree_of(5);
        assert_eq!(
            tree.inclusion_proof(5, 5),
            Err(ProofError::NoLeaf { index: 5, size: 5 })
        );
        assert_eq!(
            tree.root(6),
            Err(ProofError::TooLarge { size: 6, known: 5 })
        );
        assert_eq!(
            tree.consistency_proof(4, 3),
            Err(ProofError::Shrinks { old: 4, new: 3 })
        );
    }

    proptest! {
        #[test]
        fn every_inclusion_proof_verifies_and_a_changed_one_does_not(
            size in 1u64..80, pick in any::<u64>(), flip in any::<usize>()
        ) {
            let tree = tree_of(size);
            let index = pick % size;
            let root = tree.root(size).unwrap();
            let leaf = tree.leaf(index).unwrap();
            let proof = tree.inclusion_proof(index, size).unwrap();
            prop_assert!(verify_inclusion(index, size, &leaf, &proof, &root));
            prop_assert!(!verify_inclusion(index, size, &leaf_hash(b"other"), &proof, &root));
            if !proof.is_empty() {
                let mut bad = proof.clone();
                let at = flip % bad.len();
                bad[at][0] ^= 1;
                prop_assert!(!verify_inclusion(index, size, &leaf, &bad, &root));
                prop_assert!(!verify_inclusion(index, size, &leaf, &proof[1..], &root));
            }
            if size > 1 {
                prop_assert!(!verify_inclusion((index + 1) % size, size, &leaf, &proof, &root));
            }
        }

        #[test]
        fn every_consistency_proof_verifies_and_a_changed_one_does_not(
            new in 1u64..80, pick in any::<u64>(), flip in any::<usize>()
        ) {
            let tree = tree_of(new);
            let old = pick % (new + 1);
            let (old_root, new_root) = (tree.root(old).unwrap(), tree.root(new).unwrap());
            let proof = tree.consistency_proof(old, new).unwrap();
            prop_assert!(verify_consistency(old, new, &old_root, &new_root, &proof));
            if old > 0 && old < new {
                let mut bad = proof.clone();
                let at = flip % bad.len();
                bad[at][0] ^= 1;
                prop_assert!(!verify_consistency(old, new, &old_root, &new_root, &bad));
                prop_assert!(!verify_consistency(old, new, &leaf_hash(b"x"), &new_root, &proof));
                // Another tree of `old` leaves: same size, one leaf changed.
                let mut other = tree.clone();
                other.leaves[0] = leaf_hash(b"changed");
                let other_root = other.root(old).unwrap();
                prop_assert!(!verify_consistency(old, new, &other_root, &new_root, &proof));
            }
        }

        #[test]
        fn the_frontier_root_is_the_trees_root_at_every_size(size in 0u64..300) {
            let tree = tree_of(size);
            let mut frontier = Frontier::new();
            prop_assert_eq!(frontier.root(), empty_root());
            for i in 0..size {
                frontier.push(tree.leaf(i).unwrap());
                prop_assert_eq!(frontier.root(), tree.root(i + 1).unwrap());
            }
            prop_assert_eq!(frontier.size(), size);
        }
    }
}
