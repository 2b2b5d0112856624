"""The table API's services: rows, embeds, functions, the access rules and the description."""
