AND status = 'completed' AND CAST(round(unixepoch(expires_at, 'auto', 'subsec') * 1000) AS INTEGER)
    > $1
