#!/usr/bin/env python3
"""Tests of scripts/module_graph.py on small crates written to a temporary
directory: what is an edge, what is not, and which circles are found."""

import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import module_graph  # noqa: E402


def graph_of(files):
    """{file: sorted deps} of a crate whose src/ holds `files`."""
    with tempfile.TemporaryDirectory() as d:
        for rel, text in files.items():
            path = os.path.join(d, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(text)
        crate = module_graph.Crate(d)
        crate.load()
        return {rel: sorted(crate.edges(rel)) for rel in crate.code}


class Edges(unittest.TestCase):
    def test_comments_strings_doc_examples_and_tests_are_no_edges(self):
        g = graph_of(
            {
                "lib.rs": """//! Names crate::a::X in a doc comment.
/// ```
/// use crate::b::Y;
/// ```
pub mod a;
pub mod b;
/* crate::a /* nested */ crate::b */
pub fn f() -> &'static str {
    let _c = '"';
    let _r = r#"crate::a "quoted" "#;
    let _b = b"crate::b";
    "crate::a::X"
}
#[cfg(test)]
mod tests {
    use crate::a::X;
}
""",
                "a.rs": "pub struct X;\n#[cfg(test)]\nfn helper<A, B>() { crate::b::f(); }\n",
                "b.rs": "pub fn f() {}\n",
            }
        )
        self.assertEqual(g, {"lib.rs": [], "a.rs": [], "b.rs": []})

    def test_use_trees_super_self_and_children(self):
        g = graph_of(
            {
                "lib.rs": "pub mod a;\npub mod b;\npub mod d;\nmod sync;\n"
                "use std::{sync::Arc};\npub(super) fn f() {}\n",
                "a.rs": "use crate::{b::f, d::{e, self}};\n",
                "b.rs": "pub fn f() { self::g() }\nfn g() {}\n",
                "d/mod.rs": "pub mod e;\npub fn w() { e::v() }\n",
                "d/e.rs": "pub fn v() { super::super::b::f(); }\n",
                "sync.rs": "",
            }
        )
        self.assertEqual(g["lib.rs"], [])
        self.assertEqual(g["a.rs"], ["b.rs", "d/e.rs", "d/mod.rs"])
        self.assertEqual(g["b.rs"], [])
        self.assertEqual(g["d/mod.rs"], ["d/e.rs"])
        self.assertEqual(g["d/e.rs"], ["b.rs"])

    def test_a_path_resolves_to_the_deepest_module_file(self):
        g = graph_of(
            {
                "lib.rs": "pub mod a;\n",
                "a.rs": "pub mod b;\npub struct C;\n",
                "a/b.rs": "pub fn f() { let _ = crate::a::C; }\n",
            }
        )
        self.assertEqual(g["a/b.rs"], ["a.rs"])
        self.assertEqual(g["a.rs"], [])

    def test_inline_modules_belong_to_their_file(self):
        g = graph_of(
            {
                "lib.rs": "pub mod a;\npub mod b;\n",
                "a.rs": "mod inner { pub fn q() { super::h(); crate::b::f(); } }\n"
                "pub fn h() { inner::q() }\n",
                "b.rs": "pub fn f() {}\n",
            }
        )
        self.assertEqual(g["a.rs"], ["b.rs"])


class Circles(unittest.TestCase):
    def test_a_parent_and_a_child_naming_each_other_are_a_circle(self):
        g = graph_of(
            {
                "lib.rs": "pub mod s;\npub mod t;\n",
                "s/mod.rs": "mod k;\npub use k::K;\npub trait E {}\n",
                "s/k.rs": "pub struct K;\nimpl super::E for K {}\n",
                "t.rs": "use crate::s::K;\n",
            }
        )
        self.assertEqual(module_graph.components(g), [["s/k.rs", "s/mod.rs"]])

    def test_a_layered_crate_has_none(self):
        g = graph_of(
            {
                "lib.rs": "pub mod top;\npub mod bottom;\n",
                "top.rs": "use crate::bottom::B;\n",
                "bottom.rs": "pub struct B;\n",
            }
        )
        self.assertEqual(module_graph.components(g), [])


if __name__ == "__main__":
    unittest.main()
