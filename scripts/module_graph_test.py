#!/usr/bin/env python3
"""Tests of scripts/module_graph.py on small crates written to a temporary
directory: what is an edge, what is not, and which circles are found."""

import contextlib
import io
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import module_graph  # noqa: E402


def write(d, files):
    for rel, text in files.items():
        path = os.path.join(d, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)


def graph_of(files):
    """{file: sorted deps} of a crate whose src/ holds `files`."""
    with tempfile.TemporaryDirectory() as d:
        write(d, files)
        crate = module_graph.Crate(d)
        crate.load()
        return {rel: sorted(crate.edges(rel)) for rel in crate.code}


def check(crates):
    """The check's exit status and output on a tree whose crates/NAME/src
    holds crates[NAME], as CI runs it (every crate found on its own)."""
    with tempfile.TemporaryDirectory() as d:
        for name, files in crates.items():
            write(os.path.join(d, "crates", name, "src"), files)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            status = module_graph.main([], root=d)
        return status, out.getvalue()


# A context/ folder as the core's: one type, `CtxState`, whose inherent
# impls are spread over stage files, each calling only the files below it
# (mod.rs -> submit.rs -> end.rs -> state.rs), by method.
CONTEXT = {
    "lib.rs": "mod context;\npub use context::Context;\n",
    "context/mod.rs": "mod end;\nmod state;\nmod submit;\n"
    "use state::CtxState;\n"
    "pub struct Context { st: CtxState }\n"
    "impl Context { pub fn go(&mut self) { self.st.submit_bio(); } }\n",
    "context/state.rs": "pub(crate) struct CtxState { pub(crate) n: u64 }\n"
    "impl CtxState { pub(crate) fn in_flight(&self) -> u64 { self.n } }\n",
    "context/submit.rs": "use super::state::CtxState;\n"
    "impl CtxState {\n"
    "    pub(crate) fn submit_bio(&mut self) {\n"
    "        let total: u64 = [1u64, 2].iter().sum();\n"
    "        self.n += total + self.in_flight();\n"
    "        self.end_bio();\n"
    "    }\n"
    "}\n",
    "context/end.rs": "use super::state::CtxState;\n"
    "impl CtxState { pub(crate) fn end_bio(&mut self) { self.n -= 1; } }\n",
}


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


class Methods(unittest.TestCase):
    def test_split_impl_calls_are_edges_down_the_stages(self):
        g = graph_of(CONTEXT)
        self.assertEqual(g["context/mod.rs"], ["context/state.rs", "context/submit.rs"])
        self.assertEqual(g["context/submit.rs"], ["context/end.rs", "context/state.rs"])
        self.assertEqual(g["context/end.rs"], ["context/state.rs"])
        self.assertEqual(g["context/state.rs"], [])

    def test_std_names_and_shared_names_are_no_edges(self):
        files = dict(CONTEXT)
        # `sum` of a split impl: `.sum()` of an iterator must not point at it.
        files["context/state.rs"] += "impl CtxState { pub(crate) fn sum(&self) -> u64 { 0 } }\n"
        # `retire` defined twice (two types): nobody can tell whose a call is.
        files["context/end.rs"] += (
            "impl CtxState { pub(crate) fn retire(&self) {} }\n"
            "pub(crate) struct Other;\nimpl Other { pub(crate) fn retire(&self) {} }\n"
        )
        files["context/submit.rs"] += "fn f(s: &CtxState) { s.retire(); }\n"
        g = graph_of(files)
        self.assertEqual(g["context/submit.rs"], ["context/end.rs", "context/state.rs"])
        g = graph_of(dict(files, **{"context/state.rs": files["context/state.rs"]
                                    + "fn g(s: &CtxState) { s.retire(); }\n"}))
        self.assertEqual(g["context/state.rs"], [])

    def test_the_check_passes_a_layered_context(self):
        status, out = check({"core": CONTEXT})
        self.assertEqual(status, 0, out)
        self.assertIn("no circles", out)

    def test_the_check_fails_a_context_file_that_calls_a_file_above_it(self):
        files = dict(CONTEXT)
        # end.rs (below submit.rs) calls submit_bio, defined in submit.rs.
        files["context/end.rs"] = (
            "use super::state::CtxState;\n"
            "impl CtxState {\n"
            "    pub(crate) fn end_bio(&mut self) {\n"
            "        self.n -= 1;\n"
            "        self.submit_bio();\n"
            "    }\n"
            "}\n"
        )
        status, out = check({"core": CONTEXT, "upward": files})
        self.assertEqual(status, 1, out)
        self.assertIn("circle: context/end.rs context/submit.rs", out)
        self.assertIn("context/end.rs -> context/submit.rs  (context/end.rs:5 .submit_bio()", out)
        self.assertIn("1 circle(s) in 1 crate(s)", out)

    def test_a_call_through_the_type_is_an_edge_too(self):
        files = dict(CONTEXT)
        files["context/end.rs"] = (
            "use super::state::CtxState;\n"
            "impl CtxState {\n"
            "    pub(crate) fn end_bio(&mut self) { Self::submit_bio(self); }\n"
            "}\n"
        )
        g = graph_of(files)
        self.assertEqual(g["context/end.rs"], ["context/state.rs", "context/submit.rs"])
        self.assertEqual(module_graph.components(g), [["context/end.rs", "context/submit.rs"]])


if __name__ == "__main__":
    unittest.main()
