-- The shops of a month ranked by revenue. `sales` is the dependency of
-- that name: the month's MonthlySales of every shop, one table.
SELECT
    CAST(RANK() OVER (ORDER BY revenue DESC) AS INT) AS rank,
    shop,
    orders,
    CAST(revenue AS DECIMAL(18, 2)) AS revenue,
    CAST(100 * revenue / SUM(revenue) OVER () AS DECIMAL(5, 1)) AS share
FROM sales
ORDER BY rank, shop;
