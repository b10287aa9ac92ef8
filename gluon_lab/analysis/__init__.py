"""Notebook analysis as importable, tested code: one module per pattern notebook.

Conventions (every notebook follows them; tests/test_notebooks.py checks the mechanical ones)
---------------------------------------------------------------------------------------------
Sources
    * `notebooks/NN-name.py` (jupytext percent format: `# %%` code cells, `# %% [markdown]` prose,
      cell tags as `# %% tags=["parameters"]`) is the source. `notebooks/NN-name.ipynb` is generated
      from it without outputs by `make notebooks` (`ci/sync_notebooks.py`: deterministic, running it
      twice gives no diff) and committed. Edit the .py (or the paired notebook in JupyterLab with
      jupytext, `notebooks/jupytext.toml`), run `make notebooks`, commit both. The sync test fails
      when the two disagree and names the notebook and the cell.
    * The notebook metadata lives in the .py header: kernelspec, language_info (papermill needs them)
      and `gluon_lab: {pattern, summary}` (the report index reads it).
    * The first cell is markdown starting with "# NN — title"; the first code cell is the one tagged
      `parameters`; one code cell is tagged `headline` (its first image is the index thumbnail).

Cells: prose in the notebook, code in the module
    * parameters cell: `mode = "auto"`, `quick = False`, `results_dir = None`, `gpu = None` (and
      `parts = [...]` where the plan has parts). `results_dir = None` means the repository's committed
      `results/` (`common.results_root`, found from the package location), so the notebook shows the
      same records from any working directory; a relative path is resolved against the cwd and must
      exist (replay).
    * setup cell::

          from gluon_lab.analysis import common as cm, <pattern> as ana
          ctx = cm.setup(ana.NB, mode=mode, gpu=gpu, results_dir=results_dir)
          print(ctx.describe())

    * measure-or-replay cell: `if ctx.run_mode == "measure": ana.measure(ctx, quick=quick, parts=parts)`,
      then `allrec = cm.load(ctx)` and `cm.show(cm.overview(ctx, allrec))`.
    * every later code cell is a few calls: `cm.show(ana.some_table(df))`, `fig = ana.some_figure(df)`,
      `cm.show(cm.takeaways(ana.takeaways(...)))`. No loops over records, no pivots in the notebook.

Module functions (gluon_lab/analysis/<pattern>.py, `NB = "NN-name"` at the top)
    * take the records DataFrame as loaded by `common.load` (plus the Context or the datasheet spec
      when they need one) and return a pandas DataFrame, a matplotlib Figure, a Markdown str or a
      small dict; they never display or print. Kernel sources are returned as str (notebook: print).
    * missing data never raises: tables come back empty, figures and notes come back None, and the
      notebook shows `common.missing_note(...)` / the module's note (common.show skips None). Figures
      with zero panels are never drawn (`common.heatmaps` returns None instead).
    * conclusions are computed from the same records the tables show (`takeaways(...) -> list[str]`,
      each a sentence; `common.takeaways` makes the bullet list). No number is typed into prose.
    * one run per comparison: select with `common.newest_run` (the newest run holding the variants a
      section compares), flag stale records (`common.stale_note`), never mix runs in one ratio.
    * figures are drawn with pyplot (`plt.subplots` or `gluon_lab.plots`): in the notebook, assigning
      `fig = ana.f(df)` lets the inline backend draw it once at the end of the cell; `cm.show(fig)`
      draws it in order with other outputs (and closes it).
    * everything that touches `gluon_lab.kernels.*`, `experiments`, `codegen`, `ops` sits in one small
      function of the pattern module (`kernel_sources()`, `census_table()`, `measure()`, ...) listed in
      the module docstring under "Kernel-facing", so the kernel refactor has one place to adapt.
      Prefer `codegen.inspect_variant(op, variant, N=..., dtype=..., **config)` for CPU compiles.
    * shared by two or more notebooks -> `common`; otherwise it stays in the pattern module.
    * a pattern module that holds two ideas is split by idea, each readable in one sitting, data flowing
      one way (04: `warp_specialized` imports `gemm`, the GEMM studies; `ws_timeline`, section 2's
      per-partition timeline and finish spread, and `ws_sanitizer`, section 8's sanitizer reading, sit
      beside it); the notebook imports each (`gemm as gana`, `ws_timeline as wtl`).

Tests
    * `tests/fixtures/records/<gpu>/<NB>.jsonl`: unmodified lines copied from results/<gpu>/<NB>.jsonl
      (<= ~300 per notebook), chosen so every function has data, including the ceilings records of
      the same runs. `cm.setup(NB, mode="replay", results_dir=<tests/fixtures/records>)` loads them.
    * `tests/test_analysis_<pattern>.py`: real values recomputed from the fixture (a SOL % from bytes
      and ms, a ratio table's shape and one cell), figures by their axes/lines; CPU-only and fast
      (CPU compiles only in tests marked `slow`).
"""
