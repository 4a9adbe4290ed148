"""Explain replies: a few sentences built from the code (Python: `ast`; Julia, C, shell: regexes)."""

import ast
import re


def listing(names, limit=6):
    names = list(names)
    if len(names) > limit:
        names = names[:limit] + [f"{len(names) - limit} more"]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def plural(n, word):
    if n == 1:
        return f"{n} {word}"
    return f"{n} {word}es" if word.endswith("s") else f"{n} {word}s"


def reply(opening, *sentences):
    """The opening sentence, then one per (template, names[, limit]) whose names are not empty: the
    template with the names listed."""
    lines = [opening]
    for template, names, *limit in sentences:
        if names:
            lines.append(template.format(listing(names, *limit)))
    return "\n".join(lines) + "\n"


def explain_python(code):
    """Imports, classes with their methods, functions; None when the code does not parse."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return None
    imports, classes, functions = [], [], []
    for node in tree.body:
        if isinstance(node, ast.Import):
            imports += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            imports.append(node.module)
        elif isinstance(node, ast.ClassDef):
            methods = [n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
            classes.append((node.name, methods))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            functions.append(node.name)
    lines = [f"The code defines {plural(len(classes), 'class')} and {plural(len(functions), 'function')}."]
    if imports:
        lines.append(f"It imports {listing(dict.fromkeys(imports), 5)}.")
    for name, methods in classes[:4]:
        lines.append(f"The class {name} has the methods {listing(methods)}." if methods
                     else f"The class {name} has no methods.")
    if functions:
        lines.append(f"The functions are {listing(functions)}.")
    return "\n".join(lines) + "\n"


def explain_julia(code):
    """The module, its types, functions, Base extensions and the type used most."""
    module = re.search(r"^module (\w+)", code, re.M)
    types = re.findall(r"^(?:mutable struct|struct|abstract type) (\w+)", code, re.M)
    defs = re.findall(r"^(?:function )?([\w.!]+)\(.*?\)(?:\s*=|\s*$)", code, re.M)
    functions = [d for d in dict.fromkeys(defs) if "." not in d and d not in types]
    extends = [d for d in dict.fromkeys(defs) if d.startswith("Base.")]
    main = [max(types, key=lambda t: len(re.findall(rf"\b{t}\b", code)))] if types else []
    return reply(f"The code defines the module {module.group(1) if module else 'Main'} with "
                 f"{plural(len(types), 'type')} and {plural(len(functions), 'function')}.",
                 ("The types are {}.", types), ("The functions are {}.", functions), ("It extends {}.", extends),
                 ("The type {} is used throughout the code.", main))


def explain_c(code):
    """Includes, macros, structs and declared functions of a C header."""
    includes = re.findall(r"^#\s*include\s*[<\"]([^>\"]+)", code, re.M)
    macros = [m for m in dict.fromkeys(re.findall(r"^#\s*define\s+(\w+)", code, re.M)) if not m.startswith("_")]
    structs = list(dict.fromkeys(re.findall(r"\bstruct\s+(\w+)\s*\{", code)))
    declaration = r"^\s*(?:extern\s+)?[\w\s\*]+?\b(\w+)\s*\([^;{]*\)\s*(?:__\w+.*)?;"
    functions = list(dict.fromkeys(re.findall(declaration, code, re.M)))
    return reply(f"The code is a C header with {plural(len(macros), 'macro')}, {plural(len(structs), 'struct')} "
                 f"and {plural(len(functions), 'function')} declared.",
                 ("It includes {}.", includes, 5), ("The macros are {}.", macros), ("The structs are {}.", structs),
                 ("The functions are {}.", functions))


def explain_shell(code):
    """Shell functions, variables set and commands run."""
    functions = list(dict.fromkeys(re.findall(r"^\s*(?:function\s+)?(\w+)\s*\(\)\s*\{?", code, re.M)))
    variables = list(dict.fromkeys(re.findall(r"^\s*(?:export\s+|local\s+)?([A-Za-z_]\w*)=", code, re.M)))
    return reply(f"The code is a shell script with {plural(len(functions), 'function')} "
                 f"that sets {plural(len(variables), 'variable')}.",
                 ("The functions are {}.", functions), ("The variables are {}.", variables))


EXPLAIN = {"python": explain_python, "julia": explain_julia, "c": explain_c, "shell": explain_shell}
