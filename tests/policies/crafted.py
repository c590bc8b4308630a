"""Crafted trajectories for policy tests."""

from __future__ import annotations

from dtoc_rl.data.schema import Need, Step, Trajectory


def crafted(sizes, needs=None, family="claude-sonnet", user_turns=(), tool="bash", args="cat f{k}"):
    """Step k outputs sizes[k] chars; needs: {step: [earlier steps]}; user_turns: steps preceded by a
    user message."""
    needs = needs or {}
    steps = []
    for k, size in enumerate(sizes):
        steps.append(
            Step(
                index=k,
                user_text="continue please" if k in user_turns else "",
                assistant_text=f"thinking {k}",
                tool_name=tool,
                tool_args=args.format(k=k),
                output="x" * size,
                output_tokens=-(-size // 4),
                needs=[Need(step=j, kind="provenance", evidence="span") for j in needs.get(k, [])],
            )
        )
    return Trajectory(
        traj_id=f"crafted/{len(sizes)}-{hash(tuple(sizes)) & 0xFFFF}",
        source="test",
        model_raw=family,
        model_family=family,
        task_id="t1",
        task_text="do it",
        success=True,
        steps=steps,
    )
