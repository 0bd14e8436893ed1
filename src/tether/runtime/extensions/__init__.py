"""What users plug into a run: settings hooks (tool, turn and session events; the scripts they
run), mods (Python extensions) and skills (SKILL.md folders, the bundled ones included).
"""
