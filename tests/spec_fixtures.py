"""Paths and names shared by the tests of the demo spec set."""

from das.resources import demo_specs

DEMO_SPECS = demo_specs("safetab_p")
# The LEVEL-0 "alone" iterations of the six major race groups, in CENRACE bit order.
GROUP_NAMES = (
    "White alone",
    "Black or African American alone",
    "American Indian and Alaska Native alone",
    "Asian alone",
    "Native Hawaiian and Other Pacific Islander alone",
    "Some Other Race alone",
)


def group_of_code(specs) -> dict[int, int]:
    """Each race code's major group, read straight from the level-0 'X alone' iterations."""
    iteration_group = {
        int(code): GROUP_NAMES.index(name)
        for code, name, level in zip(
            specs.iteration_code, specs.iteration_name, specs.level, strict=True
        )
        if level == 0 and name in GROUP_NAMES
    }
    return {
        int(code): iteration_group[int(iteration)]
        for iteration, code in zip(specs.pair_iteration, specs.pair_code, strict=True)
        if int(iteration) in iteration_group
    }
