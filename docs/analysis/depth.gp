# attn-analyze plot; redraw with: cd docs/analysis && gnuplot depth.gp
set terminal svg size 700,480 dynamic font 'Helvetica,11' noenhanced background rgb 'white'
set output 'depth.svg'
set datafile separator ','
set key autotitle columnhead
set grid
set key font ',9' samplen 2
set multiplot layout 1,1 title 'Rank collapse of stacked softmax layers'
set logscale y
set yrange [1e-12:2]
set key bottom left
set xlabel 'layers'
set ylabel '|X - 1 xbar^T|_F / |X|_F'
set title 'geometric mean and range over draws (0 shown at the bottom)'
plot 'depth_depth.csv' using 1:($2 < 1e-12 ? 1e-12 : $2):($3 < 1e-12 ? 1e-12 : $3):4 with yerrorlines lc rgb '#d62728' title 'pure attention', 'depth_depth.csv' using 1:5:6:7 with yerrorlines lc rgb '#1f77b4' title 'with residual connections'
unset multiplot
