"""Shared pieces of the notebook generators (ci/make_nb0*.py): cell constructors and the writer
that stamps the metadata papermill needs (kernelspec + language) and the report index reads."""
import nbformat as nbf

md = nbf.v4.new_markdown_cell


def code(src, tags=None):
    c = nbf.v4.new_code_cell(src)
    if tags:
        c.metadata["tags"] = tags
    return c


def write(cells, path: str, pattern: str, summary: str) -> None:
    nb = nbf.v4.new_notebook(cells=cells)
    nb.metadata = {"gluon_lab": {"pattern": pattern, "summary": summary},
                   "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                   "language_info": {"name": "python"}}
    nbf.write(nb, path)


# the setup lines every pattern notebook runs after its imports
PANDAS_AND_MODE = '''pd.set_option("display.width", 220)
pd.set_option("display.max_columns", 40)
pd.set_option("display.max_rows", 200)
pd.set_option("display.max_colwidth", 160)
run_mode = nbk.resolve_mode(mode)
slug = nbk.gpu_slug(gpu, run_mode)
spec = device.DATASHEET.get(slug)'''
