SELECT current_schema()
